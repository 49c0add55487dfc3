package com.acme.orders;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/** Every order's snapshot, kept in a static map that nothing ever evicts (the leak). */
public final class OrderArchive {
    static final Map<String, OrderSnapshot> SNAPSHOTS = new ConcurrentHashMap<>();
    private static int next;

    private OrderArchive() {}

    static synchronized int archive(int orders) {
        for (int i = 0; i < orders; i++) {
            String id = "order-" + next++;
            SNAPSHOTS.put(id, new OrderSnapshot(id, new CheckoutSession("checkout-" + next)));
        }
        return SNAPSHOTS.size();
    }
}
