package com.acme.orders;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/** Client of the warehouse service: no read timeout either. */
public final class WarehouseClient {
    private final String host;
    private final int port;

    public WarehouseClient(String host, int port) {
        this.host = host;
        this.port = port;
    }

    public Map<String, Integer> fetchLevels() throws IOException {
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(host, port), 2000);
            OutputStream out = socket.getOutputStream();
            out.write("GET /levels\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = socket.getInputStream();
            byte[] body = in.readAllBytes();
            Map<String, Integer> levels = new HashMap<>();
            levels.put("all", body.length);
            return levels;
        }
    }
}
