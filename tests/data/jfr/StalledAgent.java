// A tiny stalled "agent" JVM for the JFR fixture (scripts/make_jfr records it).
//
// - tool-pool-1-thread-N: a bounded tool pool whose every thread calls
//   ShippingTools.carrierRates, which reads from a carrier that accepts and never answers
//   (a native socket read with no timeout);
// - runner-cache: a RunnerCache that keeps every RunnerCache$Entry it builds (the leak);
// - ledger-writer-N: two threads contending for one synchronized LedgerLock;
// - session-store-N: two threads contending for one ReentrantLock (thread parks);
// - rate-table: a thread on CPU (execution samples).
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

public final class StalledAgent {
    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 15;
        ServerSocket carrier = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        List<Socket> held = new ArrayList<>();
        Thread acceptor = new Thread(() -> {
            try {
                while (true) {
                    held.add(carrier.accept()); // accepts and never writes
                }
            } catch (Exception e) {
                // closed at exit
            }
        }, "carrier-stub");
        acceptor.setDaemon(true);
        acceptor.start();

        AtomicInteger n = new AtomicInteger();
        ThreadFactory named = r -> {
            Thread t = new Thread(r, "tool-pool-1-thread-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
        ExecutorService tools = Executors.newFixedThreadPool(4, named);
        for (int i = 0; i < 4; i++) {
            tools.submit(() -> ShippingTools.carrierRates(carrier.getLocalPort()));
        }

        Thread leak = new Thread(RunnerCache::fill, "runner-cache");
        leak.setDaemon(true);
        leak.start();

        LedgerLock ledger = new LedgerLock();
        for (int i = 1; i <= 2; i++) {
            Thread w = new Thread(ledger::writeForever, "ledger-writer-" + i);
            w.setDaemon(true);
            w.start();
        }
        ReentrantLock store = new ReentrantLock();
        for (int i = 1; i <= 2; i++) {
            Thread s = new Thread(() -> SessionStore.saveForever(store), "session-store-" + i);
            s.setDaemon(true);
            s.start();
        }
        Thread busy = new Thread(RateTable::recompute, "rate-table");
        busy.setDaemon(true);
        busy.start();
        Thread.sleep(seconds * 1000);
        System.exit(0);
    }
}

final class ShippingTools {
    static String carrierRates(int port) {
        return CarrierClient.fetchRates(port);
    }
}

final class CarrierClient {
    static String fetchRates(int port) {
        try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
            socket.getOutputStream().write("GET /rates\n".getBytes());
            InputStream in = socket.getInputStream();
            return "read " + in.read(); // no read timeout: blocks for as long as the carrier
        } catch (Exception e) {
            return "unavailable";
        }
    }
}

final class RunnerCache {
    static final class Entry {
        final String tenant;
        final byte[] state;

        Entry(String tenant, int size) {
            this.tenant = tenant;
            this.state = new byte[size]; // allocated here: old-object samples name this frame
        }
    }

    static final Map<String, Entry> RUNNERS = new HashMap<>();

    static void fill() {
        long i = 0;
        while (true) {
            RUNNERS.put("tenant-" + i, new Entry("tenant-" + i, 4096));
            byte[] garbage = new byte[64 * 1024]; // short-lived: keeps the young GCs coming
            garbage[0] = (byte) i;
            i++;
            if (i % 2 == 0) {
                try {
                    Thread.sleep(5);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }
}

final class RateTable {
    static volatile long checksum;

    static void recompute() {
        long x = 17;
        while (true) { // on CPU: execution samples
            for (int i = 0; i < 1_000_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
            checksum = x;
        }
    }
}

final class LedgerLock {
    synchronized void write() throws InterruptedException {
        Thread.sleep(150); // holds the monitor: the other writer blocks on entry
    }

    void writeForever() {
        try {
            while (true) {
                write();
            }
        } catch (InterruptedException e) {
            // exit
        }
    }
}

final class SessionStore {
    static void saveForever(ReentrantLock lock) {
        try {
            while (true) {
                lock.lock();
                try {
                    Thread.sleep(150);
                } finally {
                    lock.unlock();
                }
            }
        } catch (InterruptedException e) {
            // exit
        }
    }
}
