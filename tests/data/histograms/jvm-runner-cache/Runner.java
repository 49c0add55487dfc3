package com.example.agent;

/** Stands in for com.google.adk.runner.Runner: an agent tree and a scratch buffer. */
final class Runner {
  final String sessionId;
  final SupportAgent agent;
  final byte[] scratch = new byte[512];

  Runner(String sessionId) {
    this.sessionId = sessionId;
    this.agent = new SupportAgent("support_agent");
  }
}
