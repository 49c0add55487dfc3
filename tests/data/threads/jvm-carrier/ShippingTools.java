package com.acme.shipping;

import java.io.IOException;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;

/** The agent's shipping tools (what an ADK FunctionTool would wrap). */
public final class ShippingTools {
    private final CarrierClient carrier;

    public ShippingTools(CarrierClient carrier) {
        this.carrier = carrier;
    }

    /** Tool "carrierRates": the carrier's rates for one shipment. */
    public String carrierRates(String shipmentId) throws IOException {
        String query = URLEncoder.encode(shipmentId, StandardCharsets.UTF_8);
        String json = carrier.get("/v1/rates?shipment=" + query);
        return json.trim();
    }
}
