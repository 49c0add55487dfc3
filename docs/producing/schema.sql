-- The run ledger and the side-effect journal, as incidentkit reads them (PostgreSQL).
--
-- Neither table is part of ADK: your workers write them (docs/producing-evidence.md;
-- docs/producing/incidentkit_plugin.py and IncidentkitPlugin.java do). The column names, types
-- and NOT NULLs are those of incidentkit/store.py; tests/adk/test_producing_evidence.py checks
-- that this file creates the same columns. Other names are fine: map them with the manifest's
-- columns = { canonical = "yours" }.

-- One row per invocation a worker starts, written before the run; a live worker renews the
-- lease, a row whose lease expired while RUNNING belongs to a dead worker.
CREATE TABLE agent_run (
  run_id        uuid         PRIMARY KEY,
  app_name      text         NOT NULL,
  user_id       varchar(128) NOT NULL,
  session_id    varchar(128) NOT NULL,
  invocation_id varchar(256),                       -- the ADK invocation (e-<uuid>)
  request       jsonb        NOT NULL,              -- the user message, so a run can be replayed
  status        varchar(16)  NOT NULL
                CHECK (status IN ('RUNNING', 'PAUSED', 'DONE', 'FAILED', 'PARKED')),
  owner         varchar(128),                       -- the worker holding the lease
  lease_until   timestamptz,                        -- NULL once the run is finished
  attempts      integer      NOT NULL DEFAULT 0,    -- recoveries: the sweeper's claim adds one
  started_at    timestamptz  NOT NULL DEFAULT now(),
  updated_at    timestamptz  NOT NULL DEFAULT now() -- every claim, renewal and finish
);
-- The sweeper's question: which RUNNING rows have an expired lease?
CREATE INDEX agent_run_expired ON agent_run (lease_until) WHERE status = 'RUNNING';

-- One row per side effect, keyed by its business identity (send-invoice:INV-77), never by the
-- function call id: a re-driven run calls again with a new id for the same intent.
CREATE TABLE tool_journal (
  key              varchar(256) PRIMARY KEY,
  invocation_id    varchar(256) NOT NULL,           -- the invocation that acted
  function_call_id varchar(256) NOT NULL DEFAULT '',
  status           varchar(16)  NOT NULL CHECK (status IN ('INTENT', 'DONE')),
  result           jsonb,                           -- what the effect returned (DONE)
  created_at       timestamptz  NOT NULL DEFAULT now(),
  updated_at       timestamptz  NOT NULL DEFAULT now()
);

-- The kit needs every column above except agent_run's owner and lease_until and
-- tool_journal's function_call_id and result; a row it cannot use (a missing value it needs, a
-- status not listed above, a repeated key) is a reject with its key and the reason.
-- Times without a zone (timestamp, SQLite text) need timezone = "UTC" in the manifest.
