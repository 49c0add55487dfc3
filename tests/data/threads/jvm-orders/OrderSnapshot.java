package com.acme.orders;

/** One order as it stood at checkout: its id, its checkout session and 1200 bytes of payload. */
public final class OrderSnapshot {
    final String orderId;
    final CheckoutSession checkout;
    final byte[] payload = new byte[1200];

    OrderSnapshot(String orderId, CheckoutSession checkout) {
        this.orderId = orderId;
        this.checkout = checkout;
    }
}
