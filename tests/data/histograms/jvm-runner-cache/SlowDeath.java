package com.example.agent;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

/**
 * Serves "turns": each line on stdin is a number of new sessions; every session gets a runner
 * from the unbounded {@link RunnerCache}. Prints "pid N", then "READY" after each batch.
 */
public final class SlowDeath {
  public static void main(String[] args) throws Exception {
    System.out.println("pid " + ProcessHandle.current().pid());
    var in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    int next = 0;
    for (String line; (line = in.readLine()) != null; ) {
      int sessions = Integer.parseInt(line.trim());
      for (int i = 0; i < sessions; i++) {
        RunnerCache.runnerFor("s-" + next++);
      }
      System.out.println("READY " + RunnerCache.RUNNERS.size());
      System.out.flush();
    }
  }

  private SlowDeath() {}
}
