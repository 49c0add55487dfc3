package com.acme.shipping;

import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/** Knowledge-base work of the agent: busy, but never in one place for long. */
public final class KnowledgeBase {
    private volatile long sink;

    /** One article from the KB service (slow, but it answers), with a read timeout. */
    public int fetchArticle(String baseUrl, String id) throws IOException {
        HttpURLConnection conn = (HttpURLConnection) new URL(baseUrl + "/kb/" + id).openConnection();
        conn.setConnectTimeout(2000);
        conn.setReadTimeout(30_000);
        try (InputStream in = conn.getInputStream()) {
            return in.readAllBytes().length;
        } finally {
            conn.disconnect();
        }
    }

    /** Re-indexes every article (score on the CPU, back off between), then watches for changes. */
    public void reindexThenWatch(int articles) throws InterruptedException {
        for (int i = 0; i < articles; i++) {
            score(200);
            backOff(100);
        }
        while (!Thread.currentThread().isInterrupted()) {
            awaitChange(1000);
        }
    }

    void score(long millis) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        long h = sink;
        while (System.nanoTime() < until) {
            for (int i = 0; i < 10_000; i++) {
                h = h * 31 + i ^ (h >>> 7);
            }
        }
        sink = h;
    }

    void backOff(long millis) throws InterruptedException {
        Thread.sleep(millis);
    }

    void awaitChange(long millis) {
        LockSupport.parkNanos(this, TimeUnit.MILLISECONDS.toNanos(millis));
    }
}
