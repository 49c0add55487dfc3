package com.acme.orders;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;

/** Prices by SKU; refreshed from the price feed while holding the cache's monitor (the bug). */
public final class PriceCache {
    private final PriceFeedClient feed;
    private final Map<String, String> prices = new HashMap<>();

    public PriceCache(PriceFeedClient feed) {
        this.feed = feed;
    }

    public synchronized String lookup(String sku) {
        return prices.getOrDefault(sku, "unknown");
    }

    public synchronized void refresh() throws IOException {
        prices.clear();
        prices.putAll(feed.fetchAll()); // a socket read inside the monitor
    }

    void refreshForever() {
        try {
            while (true) {
                refresh();
            }
        } catch (IOException e) {
            System.err.println("price feed closed: " + e);
        }
    }
}
