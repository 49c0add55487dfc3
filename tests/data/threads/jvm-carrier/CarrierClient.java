package com.acme.shipping;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.charset.StandardCharsets;

/** HTTP client of the carrier service: a connect timeout, but (the bug) no read timeout. */
public final class CarrierClient {
    private final String baseUrl;

    public CarrierClient(String baseUrl) {
        this.baseUrl = baseUrl;
    }

    public String get(String path) throws IOException {
        HttpURLConnection conn = (HttpURLConnection) new URL(baseUrl + path).openConnection();
        conn.setConnectTimeout(2000);
        // no conn.setReadTimeout(...): a carrier that stalls mid-body blocks this thread forever
        conn.setRequestProperty("Accept", "application/json");
        try (InputStream in = conn.getInputStream()) {
            ByteArrayOutputStream body = new ByteArrayOutputStream();
            byte[] buf = new byte[8192];
            int n;
            while ((n = in.read(buf)) != -1) {
                body.write(buf, 0, n);
            }
            return body.toString(StandardCharsets.UTF_8);
        } finally {
            conn.disconnect();
        }
    }
}
