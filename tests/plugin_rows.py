"""The BigQuery Agent Analytics plugin's rows (the Arrow batches the real plugin writes) as a
DuckDB table, the stand-in for its BigQuery table in tests that run the kit's queries."""

from __future__ import annotations

import duckdb
import pyarrow as pa


def duckdb_table(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """``table`` as the DuckDB table ``name``, its JSON columns of type JSON as BigQuery's
    are."""
    con.register("plugin_rows", table)
    json_columns = [
        f.name
        for f in table.schema
        if (f.metadata or {}).get(b"ARROW:extension:name") == b"google:sqlType:json"
    ]
    cast = ", ".join(f'"{c}"::JSON AS "{c}"' for c in json_columns)
    con.execute(f'CREATE TABLE "{name}" AS SELECT * REPLACE ({cast}) FROM plugin_rows')
    con.unregister("plugin_rows")
