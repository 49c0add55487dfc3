package com.acme.orders;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.locks.ReentrantLock;

/** Stock levels guarded by a ReentrantLock that the warehouse sync holds across a socket read. */
public final class StockLedger {
    private final WarehouseClient warehouse;
    private final ReentrantLock lock = new ReentrantLock();
    private final Map<String, Integer> levels = new HashMap<>();

    public StockLedger(WarehouseClient warehouse) {
        this.warehouse = warehouse;
    }

    public boolean reserve(String sku) {
        lock.lock();
        try {
            int left = levels.getOrDefault(sku, 0);
            if (left > 0) {
                levels.put(sku, left - 1);
                return true;
            }
            return false;
        } finally {
            lock.unlock();
        }
    }

    public void sync() throws IOException {
        lock.lock();
        try {
            levels.putAll(warehouse.fetchLevels()); // a socket read while holding the lock
        } finally {
            lock.unlock();
        }
    }

    void syncForever() {
        try {
            while (true) {
                sync();
            }
        } catch (IOException e) {
            System.err.println("warehouse closed: " + e);
        }
    }
}
