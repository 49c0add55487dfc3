package com.example.agent;

/** Stands in for an LlmAgent subclass: the root of the agent tree each runner holds. */
final class SupportAgent {
  final String name;
  final String[] tools = {"order_lookup", "kb_search"};

  SupportAgent(String name) {
    this.name = name;
  }
}
