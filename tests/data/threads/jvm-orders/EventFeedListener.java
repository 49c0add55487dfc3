package com.acme.orders;

import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;

/** Reads order events pushed by a feed; waits in a socket read between events, by design. */
public final class EventFeedListener implements Runnable {
    private final Socket socket;

    public EventFeedListener(Socket socket) {
        this.socket = socket;
    }

    @Override
    public void run() {
        try {
            InputStream in = socket.getInputStream();
            while (in.read() >= 0) {
                // an order event would be handled here
            }
        } catch (IOException e) {
            System.err.println("event feed closed: " + e);
        }
    }
}
