package com.acme.orders;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/** Client of the price feed: a connect timeout, but (the bug) no read timeout. */
public final class PriceFeedClient {
    private final String host;
    private final int port;

    public PriceFeedClient(String host, int port) {
        this.host = host;
        this.port = port;
    }

    public Map<String, String> fetchAll() throws IOException {
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(host, port), 2000);
            // no socket.setSoTimeout(...): a feed that never answers blocks this thread forever
            OutputStream out = socket.getOutputStream();
            out.write("GET /prices\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = socket.getInputStream();
            Map<String, String> prices = new HashMap<>();
            int b;
            StringBuilder line = new StringBuilder();
            while ((b = in.read()) != -1) {
                line.append((char) b);
            }
            prices.put("all", line.toString());
            return prices;
        }
    }
}
