package com.acme.orders;

/** The checkout an order came from (an application class: the app never uses ADK sessions). */
public final class CheckoutSession {
    final String id;

    CheckoutSession(String id) {
        this.id = id;
    }
}
