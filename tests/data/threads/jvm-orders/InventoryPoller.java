package com.acme.orders;

/** Waits for a restock flag by spinning on Thread.yield (the bug): busy, never blocked. */
public final class InventoryPoller {
    private volatile boolean restocked;

    public void awaitRestock() {
        while (!restocked) {
            Thread.yield();
        }
    }

    public void restock() {
        restocked = true;
    }
}
