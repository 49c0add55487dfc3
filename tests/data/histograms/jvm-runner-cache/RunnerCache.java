package com.example.agent;

import java.util.HashMap;
import java.util.Map;

/** An unbounded cache of runners keyed by session: the leak. Nothing ever removes an entry. */
public final class RunnerCache {
  static final Map<String, Entry> RUNNERS = new HashMap<>();

  /** What the cache holds per session: a runner and its agent tree. */
  static final class Entry {
    final Runner runner;
    final long createdAt;

    Entry(Runner runner, long createdAt) {
      this.runner = runner;
      this.createdAt = createdAt;
    }
  }

  static Runner runnerFor(String sessionId) {
    return RUNNERS.computeIfAbsent(sessionId, id -> new Entry(new Runner(id), System.nanoTime()))
        .runner;
  }

  private RunnerCache() {}
}
