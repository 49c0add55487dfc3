package com.acme.orders;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A small stalled, spinning and leaking "orders agent" JVM for the kit's real-JVM evidence
 * (scripts/make_jvm_evidence). Commands come in the file args[0]/cmd: "orders N" archives N
 * more order snapshots and prints "ARCHIVED total"; "quit" exits. Prints "pid N", then "READY"
 * once every stalled thread sits where the README says.
 */
public final class OrdersApp {
    private OrdersApp() {}

    public static void main(String[] args) throws Exception {
        ServerSocket stub = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        List<Socket> held = new ArrayList<>();
        Thread acceptor = new Thread(() -> acceptForever(stub, held), "upstream-stub");
        acceptor.setDaemon(true);
        acceptor.start();
        int port = stub.getLocalPort();
        System.out.println("pid " + ProcessHandle.current().pid());

        // 1. A monitor held across a socket read: six tool threads BLOCKED behind it.
        PriceCache prices = new PriceCache(new PriceFeedClient("127.0.0.1", port));
        Thread refresher = new Thread(prices::refreshForever, "price-refresher");
        refresher.setDaemon(true);
        refresher.start();
        awaitState(refresher, Thread.State.RUNNABLE, "PriceFeedClient.fetchAll");
        ExecutorService tools = Executors.newFixedThreadPool(6, named("tool-exec-"));
        for (int i = 0; i < 6; i++) {
            String sku = "sku-" + i;
            tools.submit(() -> PricingTools.quotePrice(prices, sku));
        }

        // 2. A ReentrantLock held across a socket read: three inventory threads parked on it.
        StockLedger ledger = new StockLedger(new WarehouseClient("127.0.0.1", port));
        Thread sync = new Thread(ledger::syncForever, "stock-sync");
        sync.setDaemon(true);
        sync.start();
        awaitState(sync, Thread.State.RUNNABLE, "WarehouseClient.fetchLevels");
        ExecutorService inventory = Executors.newFixedThreadPool(3, named("inventory-tool-"));
        for (int i = 0; i < 3; i++) {
            String sku = "sku-" + i;
            inventory.submit(() -> InventoryTools.reserveStock(ledger, sku));
        }

        // 3. A thread spinning on Thread.yield: the same frames in every dump, but on the CPU.
        InventoryPoller poller = new InventoryPoller();
        Thread spinner = new Thread(poller::awaitRestock, "restock-poller");
        spinner.setDaemon(true);
        spinner.start();

        // 4. A listener in a socket read by design (no lock held, no tool).
        Socket feed = new Socket(InetAddress.getLoopbackAddress(), port);
        Thread listener = new Thread(new EventFeedListener(feed), "event-feed-listener");
        listener.setDaemon(true);
        listener.start();

        awaitBlocked("tool-exec-", 6, Thread.State.BLOCKED);
        awaitBlocked("inventory-tool-", 3, Thread.State.WAITING);
        System.out.println("READY");

        // 5. The leak: a static map of order snapshots that is never evicted. Commands come as a
        // file (args[0]/cmd) polled by main, which sleeps in between (idle, as a server's main).
        Path cmd = Path.of(args[0], "cmd");
        while (true) {
            if (Files.exists(cmd)) {
                String[] words = Files.readString(cmd).trim().split("\\s+");
                Files.delete(cmd);
                if (words[0].equals("quit")) {
                    break;
                }
                int total = OrderArchive.archive(Integer.parseInt(words[1]));
                System.out.println("ARCHIVED " + total);
            }
            Thread.sleep(50);
        }
        System.exit(0);
    }

    private static void acceptForever(ServerSocket stub, List<Socket> held) {
        try {
            while (true) {
                held.add(stub.accept()); // accepts and never answers
            }
        } catch (Exception e) {
            // closed at exit
        }
    }

    private static ThreadFactory named(String prefix) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, prefix + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    private static void awaitState(Thread t, Thread.State state, String frame) throws InterruptedException {
        for (int i = 0; i < 200; i++) {
            if (t.getState() == state && inFrame(t, frame)) {
                return;
            }
            Thread.sleep(25);
        }
        throw new IllegalStateException(t.getName() + " never reached " + frame);
    }

    private static boolean inFrame(Thread t, String frame) {
        for (StackTraceElement e : t.getStackTrace()) {
            String name = e.getClassName();
            String simple = name.substring(name.lastIndexOf('.') + 1);
            if ((simple + "." + e.getMethodName()).equals(frame)) {
                return true;
            }
        }
        return false;
    }

    private static void awaitBlocked(String prefix, int count, Thread.State state) throws InterruptedException {
        for (int i = 0; i < 200; i++) {
            long n = Thread.getAllStackTraces().keySet().stream()
                    .filter(t -> t.getName().startsWith(prefix) && t.getState() == state)
                    .count();
            if (n == count) {
                return;
            }
            Thread.sleep(25);
        }
        throw new IllegalStateException(prefix + " threads never all " + state);
    }
}
