package com.acme.shipping;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Mimics an ADK Java agent whose tool "carrierRates" blocks on a slowed carrier service that
 * sends its headers and then never its (chunked) body, called with no read timeout.
 * The carrier and KB services are stubs served from this JVM; it prints its pid, then READY
 * once all eight tool threads sit in the socket read, and stays alive until killed.
 */
public final class StuckTools {
    private static final InetAddress LOOPBACK = InetAddress.getLoopbackAddress();
    /** Held so no socket is closed by its cleaner: a stalled peer keeps its connection open. */
    private static final List<Object> KEEP = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        System.out.println("pid " + ProcessHandle.current().pid());
        System.out.flush();

        // audit feed: connected, never sends (the listener waits in a read by design)
        ServerSocket auditServer = new ServerSocket(0, 50, LOOPBACK);
        Socket auditClient = new Socket(LOOPBACK, auditServer.getLocalPort());
        Socket auditServed = auditServer.accept();
        KEEP.add(auditServer);
        KEEP.add(auditServed);
        Thread listener = new Thread(new AuditFeedListener(auditClient), "audit-feed-listener");
        listener.setDaemon(true);
        listener.start();

        // idle workers: one quick task each, then they wait in getTask()
        ExecutorService idle = Executors.newFixedThreadPool(2, named("idle-worker-"));
        idle.submit(() -> { });
        idle.submit(() -> { });

        // knowledge base pool: kb-exec-1 warms up then idles; kb-exec-2 re-indexes 20 articles
        // (~6 s of score/sleep), then watches for changes (parks 1 s at a time)
        KnowledgeBase kb = new KnowledgeBase();
        ExecutorService kbPool = Executors.newFixedThreadPool(2, named("kb-exec-"));
        kbPool.submit(() -> kb.score(200));
        kbPool.submit(() -> {
            kb.reindexThenWatch(20);
            return null;
        });

        // carrier service: answers the status line and headers, then stalls before the body
        ServerSocket carrier = new ServerSocket(0, 50, LOOPBACK);
        carrier.setSoTimeout(10_000);
        KEEP.add(carrier);
        ShippingTools tools =
                new ShippingTools(new CarrierClient("http://127.0.0.1:" + carrier.getLocalPort()));
        ExecutorService toolPool = Executors.newFixedThreadPool(8, named("tool-exec-"));
        for (int i = 1; i <= 8; i++) {
            String shipment = "SHP-" + (4100 + i);
            toolPool.submit(() -> tools.carrierRates(shipment));
        }
        for (int i = 0; i < 8; i++) {
            Socket conn = carrier.accept();
            KEEP.add(conn);
            readRequest(conn.getInputStream());
            OutputStream out = conn.getOutputStream();
            out.write(("HTTP/1.1 200 OK\r\n"
                    + "Content-Type: application/json\r\n"
                    + "Transfer-Encoding: chunked\r\n"
                    + "\r\n").getBytes(StandardCharsets.US_ASCII));
            out.flush();
        }
        awaitSocketRead("tool-exec-", 8);

        // the KB service answers, but only after 4 s: kb-exec-1 is in a read for that long
        ServerSocket kbServer = new ServerSocket(0, 50, LOOPBACK);
        Thread kbStub = new Thread(() -> serveSlowly(kbServer, 4_000), "kb-stub");
        kbStub.setDaemon(true);
        kbStub.start();
        String kbUrl = "http://127.0.0.1:" + kbServer.getLocalPort();
        kbPool.submit(() -> kb.fetchArticle(kbUrl, "returns-policy"));
        awaitSocketRead("kb-exec-", 1);

        System.out.println("READY");
        System.out.flush();
        new CountDownLatch(1).await();
    }

    private static ThreadFactory named(String prefix) {
        AtomicInteger next = new AtomicInteger(1);
        return r -> new Thread(r, prefix + next.getAndIncrement());
    }

    /** Reads an HTTP request's head, up to its blank line. */
    private static void readRequest(InputStream in) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        int b;
        while ((b = in.read()) != -1) {
            head.write(b);
            byte[] h = head.toByteArray();
            int n = h.length;
            if (n >= 4 && h[n - 4] == '\r' && h[n - 3] == '\n' && h[n - 2] == '\r' && h[n - 1] == '\n') {
                return;
            }
        }
    }

    private static void serveSlowly(ServerSocket server, long delayMillis) {
        try (server; Socket conn = server.accept()) {
            readRequest(conn.getInputStream());
            Thread.sleep(delayMillis);
            byte[] body = "{\"id\":\"returns-policy\",\"text\":\"30 days\"}".getBytes(StandardCharsets.UTF_8);
            OutputStream out = conn.getOutputStream();
            out.write(("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + body.length + "\r\nConnection: close\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            out.write(body);
            out.flush();
        } catch (IOException | InterruptedException e) {
            System.err.println("kb stub: " + e);
        }
    }

    /** Waits (10 s at most) until {@code count} threads named {@code prefix}* block in a socket read. */
    private static void awaitSocketRead(String prefix, int count) throws InterruptedException {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (System.nanoTime() < deadline) {
            int reading = 0;
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                if (e.getKey().getName().startsWith(prefix) && inSocketRead(e.getValue())) {
                    reading++;
                }
            }
            if (reading >= count) {
                return;
            }
            Thread.sleep(50);
        }
        throw new IllegalStateException("threads " + prefix + "* never all blocked in a socket read");
    }

    private static boolean inSocketRead(StackTraceElement[] stack) {
        for (StackTraceElement f : stack) {
            String at = f.getClassName() + "." + f.getMethodName();
            // no timeout: a blocking read0; with a timeout: a poll in park()
            if (at.equals("sun.nio.ch.SocketDispatcher.read0") || at.equals("sun.nio.ch.NioSocketImpl.park")) {
                return true;
            }
        }
        return false;
    }
}
