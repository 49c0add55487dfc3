package com.acme.orders;

/** The agent's inventory tool. */
public final class InventoryTools {
    private InventoryTools() {}

    public static boolean reserveStock(StockLedger ledger, String sku) {
        return ledger.reserve(sku);
    }
}
