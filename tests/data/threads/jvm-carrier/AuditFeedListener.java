package com.acme.shipping;

import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;

/** Reads audit events pushed by a feed; waits in a socket read between events, by design. */
public final class AuditFeedListener implements Runnable {
    private final Socket socket;

    public AuditFeedListener(Socket socket) {
        this.socket = socket;
    }

    @Override
    public void run() {
        try {
            while (awaitNext() >= 0) {
                // an audit event would be handled here
            }
        } catch (IOException e) {
            System.err.println("audit feed closed: " + e);
        }
    }

    int awaitNext() throws IOException {
        InputStream in = socket.getInputStream();
        return in.read();
    }
}
