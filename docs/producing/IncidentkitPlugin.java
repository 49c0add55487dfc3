/*
 * IncidentkitPlugin: the run ledger, the side-effect journal and the diagnostics lines of an
 * ADK Java app, written the way incidentkit reads them (docs/producing-evidence.md).
 *
 * DOCUMENTED SOURCE, NOT BUILT BY THIS PROJECT. ADK Java cannot be built on the machine the kit
 * is developed and tested on: it has Maven 3.8.7 and OpenJDK 17.0.15, but no route to Maven
 * Central (`mvn dependency:get -Dartifact=com.google.adk:google-adk:1.8.0` fails with "Could
 * not transfer artifact ... from/to central (https://repo.maven.apache.org/maven2) ... Unknown
 * host"; `curl https://repo.maven.apache.org/` cannot resolve the host), and its local Maven
 * repository holds no com.google.adk, io.reactivex.rxjava3 or com.google.genai artifact. The
 * ADK calls below follow the ADK Java sources of google/adk-java at c1bda9c (1.8.1-SNAPSHOT):
 * plugins/Plugin.java, runner/Runner.java, agents/InvocationContext.java,
 * agents/ReadonlyContext.java, tools/ToolContext.java, tools/FunctionTool.java and
 * events/Event.java. It was only compiled (javac 17) against ADK's own Plugin and BasePlugin
 * with hand-written stand-ins for the other ADK, RxJava and genai classes, and its SQL run on
 * PostgreSQL 15 against schema.sql: not against ADK itself. The Python plugin beside it,
 * incidentkit_plugin.py, does the same and is tested against the real google-adk
 * (tests/adk/test_producing_evidence.py).
 *
 * Needs ADK Java 1.8.0 or later (onRunErrorCallback), PostgreSQL with schema.sql applied, its
 * JDBC driver, and SLF4J and Jackson (both come with ADK). Register it on the Runner:
 *
 *   Runner runner = Runner.builder().agent(rootAgent).appName("invoicing")
 *       .sessionService(sessions).plugins(new IncidentkitPlugin(dataSource, workerId)).build();
 *   IncidentkitPlugin.installUndeliverableHandler();   // once, at startup
 *
 * and give the "agent.diagnostics" logger a Logback pattern the kit reads: an ISO time with
 * its offset, the level, the logger, then the message, with every stack line indented:
 *
 *   <pattern>%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX,UTC} %-5level [%thread] %logger - %msg%n%replace(%ex{full}){'(?m)^(?=.)', '    '}%nopex</pattern>
 *
 * (not tried here: no Logback on this machine), or logstash-logback-encoder's JSON lines,
 * which the kit reads as well.
 */
package com.example.agents;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.adk.agents.CallbackContext;
import com.google.adk.agents.InvocationContext;
import com.google.adk.events.Event;
import com.google.adk.models.LlmRequest;
import com.google.adk.models.LlmResponse;
import com.google.adk.plugins.BasePlugin;
import com.google.adk.tools.BaseTool;
import com.google.adk.tools.FunctionTool;
import com.google.adk.tools.ToolContext;
import com.google.genai.types.Content;
import io.reactivex.rxjava3.core.Completable;
import io.reactivex.rxjava3.core.Maybe;
import io.reactivex.rxjava3.exceptions.UndeliverableException;
import io.reactivex.rxjava3.plugins.RxJavaPlugins;
import io.reactivex.rxjava3.schedulers.Schedulers;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.sql.DataSource;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Claims a ledger row before each run (RUNNING, owner, lease, attempts), renews the lease on a
 * timer while the run lives, finishes it DONE, PAUSED (its last event waits on a long-running
 * call) or FAILED; journals the tools marked {@link SideEffect}; logs one diagnostics line per
 * run, model error and tool error. It only observes: every callback returns empty, except a
 * journaled tool whose effect already happened, which returns the stored result.
 */
public final class IncidentkitPlugin extends BasePlugin {

  /** Marks a tool method that changes the outside world; its effect is journaled. */
  @Retention(RetentionPolicy.RUNTIME)
  @Target(ElementType.METHOD)
  public @interface SideEffect {
    /** The business key, a template over the tool's arguments: "send-invoice:{invoiceId}". */
    String key();
  }

  private static final Logger log = LoggerFactory.getLogger("agent.diagnostics");
  private static final Logger own = LoggerFactory.getLogger(IncidentkitPlugin.class);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final TypeReference<Map<String, Object>> MAP = new TypeReference<>() {};
  private static final Pattern FIELD = Pattern.compile("\\{(\\w+)}");
  private static final Set<String> MISSING = Set.of("-", "?", "null"); // read as "no value"

  private static final class Run {
    final UUID runId;
    final long startNanos = System.nanoTime();
    final AtomicInteger llmCalls = new AtomicInteger();
    volatile boolean paused;

    Run(UUID runId) {
      this.runId = runId;
    }
  }

  private final DataSource db;
  private final String owner;
  private final Duration lease;
  private final Duration maxRun;
  private final int manyLlmCallsEvery;
  private final Function<String, Optional<Map<String, Object>>> lookup;
  private final ConcurrentMap<String, Run> runs = new ConcurrentHashMap<>(); // by invocation id
  private final ConcurrentMap<String, String> intents = new ConcurrentHashMap<>(); // call id -> key
  private final ScheduledExecutorService heartbeat;

  public IncidentkitPlugin(DataSource db, String owner) {
    this(db, owner, Duration.ofSeconds(60), Duration.ofSeconds(20), Duration.ofHours(1), 20, null);
  }

  /**
   * @param lookup asks the downstream system whether it saw a journal key (its result, or
   *     empty); null when no system can say, so a call that finds an INTENT refuses to act.
   */
  public IncidentkitPlugin(
      DataSource db,
      String owner,
      Duration lease,
      Duration renewEvery,
      Duration maxRun,
      int manyLlmCallsEvery,
      Function<String, Optional<Map<String, Object>>> lookup) {
    super("incidentkit");
    this.db = db;
    this.owner = owner;
    this.lease = lease;
    this.maxRun = maxRun;
    this.manyLlmCallsEvery = manyLlmCallsEvery;
    this.lookup = lookup;
    this.heartbeat =
        Executors.newSingleThreadScheduledExecutor(
            task -> {
              Thread thread = new Thread(task, "ledger-lease");
              thread.setDaemon(true);
              return thread;
            });
    long every = renewEvery.toMillis();
    heartbeat.scheduleWithFixedDelay(this::renewAll, every, every, TimeUnit.MILLISECONDS);
  }

  // --- the run: claim, renew, finish -------------------------------------------------------

  @Override
  public Maybe<Content> onUserMessageCallback(InvocationContext ctx, Content userMessage) {
    // Before the Runner stores the user message: the row predates the run's first event.
    return io(() -> claim(ctx, Optional.of(userMessage))).andThen(Maybe.empty());
  }

  @Override
  public Maybe<Content> beforeRunCallback(InvocationContext ctx) {
    return io(() -> {
          claim(ctx, ctx.userContent());
          log.info(
              "run.start inv={} app={} user={} session={}",
              token(ctx.invocationId()),
              token(ctx.appName()),
              token(ctx.userId()),
              token(ctx.session().id()));
        })
        .andThen(Maybe.empty());
  }

  @Override
  public Maybe<Event> onEventCallback(InvocationContext ctx, Event event) {
    Run run = runs.get(ctx.invocationId());
    if (run != null && !event.partial().orElse(false)) { // partial events are never stored
      // Paused when the run's last stored event waits on a long-running call; a call
      // answered later in the same run is no pause.
      run.paused = event.longRunningToolIds().map(ids -> !ids.isEmpty()).orElse(false);
    }
    return Maybe.empty();
  }

  @Override
  public Completable afterRunCallback(InvocationContext ctx) {
    return io(() -> finish(ctx, "ok"));
  }

  @Override
  public Completable onRunErrorCallback(InvocationContext ctx, Throwable error) {
    return io(
        () -> {
          finish(ctx, "error");
          log.error("run.error inv={}", token(ctx.invocationId()), error);
        });
  }

  @Override
  public Completable close() {
    return Completable.fromAction(heartbeat::shutdown);
  }

  // --- model calls -------------------------------------------------------------------------

  @Override
  public Maybe<LlmResponse> beforeModelCallback(CallbackContext cb, LlmRequest.Builder request) {
    Run run = runs.get(cb.invocationId());
    if (run != null) {
      int calls = run.llmCalls.incrementAndGet();
      if (calls % manyLlmCallsEvery == 0) {
        log.warn(
            "run.many_llm_calls inv={} agent={} calls={}",
            token(cb.invocationId()),
            token(cb.agentName()),
            calls);
      }
    }
    return Maybe.empty();
  }

  @Override
  public Maybe<LlmResponse> onModelErrorCallback(
      CallbackContext cb, LlmRequest.Builder request, Throwable error) {
    log.error(
        "model.error inv={} agent={}", token(cb.invocationId()), token(cb.agentName()), error);
    return Maybe.empty(); // empty: the error propagates unchanged
  }

  // --- tool calls: the journal of side effects, and tool.error -----------------------------

  @Override
  public Maybe<Map<String, Object>> beforeToolCallback(
      BaseTool tool, Map<String, Object> args, ToolContext tc) {
    SideEffect effect = sideEffectOf(tool);
    if (effect == null) {
      return Maybe.empty();
    }
    return Maybe.<Map<String, Object>>fromCallable(
            () -> {
              String key = businessKey(effect.key(), args, tool.name());
              Entry prior = find(key);
              if (prior != null && prior.done()) {
                return prior.result(); // it happened: replay, do not act twice
              }
              if (prior != null) { // an INTENT: a crash after acting (W4), or before?
                if (lookup == null) {
                  throw new IllegalStateException(
                      tool.name() + ": the journal holds an INTENT for " + key
                          + " and no lookup can tell whether it took effect; ask the downstream"
                          + " system, then record DONE or delete the entry");
                }
                Optional<Map<String, Object>> seen = lookup.apply(key);
                if (seen.isPresent()) {
                  done(key, seen.get());
                  return seen.get();
                }
              }
              String callId = tc.functionCallId().orElse("");
              intent(key, tc.invocationId(), callId);
              intents.put(callId, key);
              return null; // empty: the tool acts
            })
        .subscribeOn(Schedulers.io());
  }

  @Override
  public Maybe<Map<String, Object>> afterToolCallback(
      BaseTool tool, Map<String, Object> args, ToolContext tc, Map<String, Object> result) {
    String key = intents.remove(tc.functionCallId().orElse(""));
    if (key == null) {
      return Maybe.empty();
    }
    return io(() -> done(key, result)).andThen(Maybe.empty());
  }

  @Override
  public Maybe<Map<String, Object>> onToolErrorCallback(
      BaseTool tool, Map<String, Object> args, ToolContext tc, Throwable error) {
    // An INTENT stays: whether the effect happened is for the downstream system to say.
    intents.remove(tc.functionCallId().orElse(""));
    log.error(
        "tool.error inv={} tool={} call={}",
        token(tc.invocationId()),
        token(tool.name()),
        token(tc.functionCallId().orElse(null)),
        error);
    return Maybe.empty();
  }

  /** Logs errors RxJava cannot deliver (no subscriber left to tell) as rx.undeliverable. */
  public static void installUndeliverableHandler() {
    RxJavaPlugins.setErrorHandler(
        e -> log.error("rx.undeliverable", e instanceof UndeliverableException ? e.getCause() : e));
  }

  // --- the ledger (PostgreSQL; every time is the database's clock) -------------------------

  void claim(InvocationContext ctx, Optional<Content> message) throws SQLException {
    if (runs.containsKey(ctx.invocationId())) {
      return; // claimed in onUserMessageCallback; a resumed invocation arrives here first
    }
    UUID runId = UUID.randomUUID();
    execute(
        "INSERT INTO agent_run (run_id, app_name, user_id, session_id, invocation_id, request,"
            + " status, owner, lease_until, attempts, started_at, updated_at) VALUES (?, ?, ?, ?,"
            + " ?, ?::jsonb, 'RUNNING', ?, now() + make_interval(secs => ?), 0, now(), now())",
        runId,
        ctx.appName(),
        ctx.userId(),
        ctx.session().id(),
        ctx.invocationId(), // ADK hands plugins the id before the first event
        message.map(Content::toJson).orElse("{}"),
        owner,
        (double) lease.toMillis() / 1000);
    runs.put(ctx.invocationId(), new Run(runId));
  }

  private void renewAll() {
    long oldest = System.nanoTime() - maxRun.toNanos();
    // A run older than maxRun lost its caller without a callback (a disposed subscription):
    // stop renewing it, so its lease runs out and a sweeper looks at it.
    runs.entrySet().removeIf(e -> e.getValue().startNanos - oldest < 0);
    List<UUID> held = new ArrayList<>();
    runs.values().forEach(run -> held.add(run.runId));
    if (held.isEmpty()) {
      return;
    }
    try (Connection conn = db.getConnection();
        PreparedStatement st =
            conn.prepareStatement(
                "UPDATE agent_run SET lease_until = now() + make_interval(secs => ?), updated_at"
                    + " = now() WHERE run_id = ANY (?) AND owner = ? AND status = 'RUNNING'")) {
      st.setDouble(1, (double) lease.toMillis() / 1000);
      st.setArray(2, conn.createArrayOf("uuid", held.toArray()));
      st.setString(3, owner);
      st.executeUpdate();
    } catch (SQLException | RuntimeException e) { // keep beating; the next renewal may pass
      own.error("could not renew the leases of {} run(s)", held.size(), e);
    }
  }

  private void finish(InvocationContext ctx, String outcome) {
    Run run = runs.remove(ctx.invocationId()); // removed first: no longer renewed
    if (run == null) {
      return;
    }
    String status = outcome.equals("error") ? "FAILED" : run.paused ? "PAUSED" : "DONE";
    try {
      int rows =
          execute(
              "UPDATE agent_run SET status = ?, lease_until = NULL, updated_at = now()"
                  + " WHERE run_id = ? AND owner = ? AND status = 'RUNNING'",
              status,
              run.runId,
              owner);
      if (rows == 0) {
        own.warn("run {} was no longer this worker's to finish {}", run.runId, status);
      }
    } catch (SQLException e) {
      // The lease runs out and the sweeper finds the run's last events: ACTUALLY_DONE.
      own.error("could not finish run {} as {}", run.runId, status, e);
    }
    log.info(
        "run.end inv={} outcome={} ms={} llmCalls={}",
        token(ctx.invocationId()),
        outcome,
        (System.nanoTime() - run.startNanos) / 1_000_000,
        run.llmCalls.get());
  }

  /**
   * The sweeper: takes over up to {@code limit} RUNNING rows whose lease expired, counting the
   * attempt. The UPDATE checks the expiry again, so two sweepers never take the same row.
   */
  public List<Map<String, Object>> claimExpired(int limit) throws SQLException {
    String sql =
        "UPDATE agent_run SET owner = ?, attempts = attempts + 1, lease_until = now() +"
            + " make_interval(secs => ?), updated_at = now() WHERE run_id IN (SELECT run_id FROM"
            + " agent_run WHERE status = 'RUNNING' AND lease_until < now() ORDER BY lease_until"
            + " LIMIT ? FOR UPDATE SKIP LOCKED) AND status = 'RUNNING' AND lease_until < now()"
            + " RETURNING run_id, app_name, user_id, session_id, invocation_id, request::text,"
            + " attempts";
    List<Map<String, Object>> claimed = new ArrayList<>();
    try (Connection conn = db.getConnection();
        PreparedStatement st = conn.prepareStatement(sql)) {
      st.setString(1, owner);
      st.setDouble(2, (double) lease.toMillis() / 1000);
      st.setInt(3, limit);
      try (ResultSet rs = st.executeQuery()) {
        while (rs.next()) {
          claimed.add(
              Map.of(
                  "run_id", rs.getObject("run_id"),
                  "session_id", rs.getString("session_id"),
                  "attempts", rs.getInt("attempts"),
                  "request", rs.getString("request")));
        }
      }
    }
    return claimed;
  }

  // --- the journal, keyed by business identity ---------------------------------------------

  record Entry(boolean done, Map<String, Object> result) {}

  Entry find(String key) throws SQLException {
    try (Connection conn = db.getConnection();
        PreparedStatement st =
            conn.prepareStatement("SELECT status, result::text FROM tool_journal WHERE key = ?")) {
      st.setString(1, key);
      try (ResultSet rs = st.executeQuery()) {
        if (!rs.next()) {
          return null;
        }
        String result = rs.getString(2);
        return new Entry(
            "DONE".equals(rs.getString(1)), result == null ? Map.of() : parse(result));
      }
    }
  }

  void intent(String key, String invocationId, String functionCallId) throws SQLException {
    // A re-driven call takes an INTENT over; a DONE entry is never overwritten.
    execute(
        "INSERT INTO tool_journal (key, invocation_id, function_call_id, status, created_at,"
            + " updated_at) VALUES (?, ?, ?, 'INTENT', now(), now()) ON CONFLICT (key) DO UPDATE"
            + " SET invocation_id = EXCLUDED.invocation_id, function_call_id ="
            + " EXCLUDED.function_call_id, updated_at = now() WHERE tool_journal.status ="
            + " 'INTENT'",
        key,
        invocationId,
        functionCallId);
  }

  void done(String key, Map<String, Object> result) throws SQLException {
    String json;
    try {
      json = JSON.writeValueAsString(result);
    } catch (java.io.IOException e) {
      throw new SQLException("unwritable journal result for " + key, e);
    }
    execute(
        "UPDATE tool_journal SET status = 'DONE', result = ?::jsonb, updated_at = now()"
            + " WHERE key = ?",
        json,
        key);
  }

  // --- helpers -----------------------------------------------------------------------------

  /** The {@link SideEffect} of a FunctionTool's method, or null. */
  static SideEffect sideEffectOf(BaseTool tool) {
    return tool instanceof FunctionTool function
        ? function.func().getAnnotation(SideEffect.class)
        : null;
  }

  /** The key template filled from the call's arguments; a missing one refuses to act. */
  static String businessKey(String template, Map<String, Object> args, String tool) {
    Matcher m = FIELD.matcher(template);
    StringBuilder key = new StringBuilder();
    while (m.find()) {
      Object value = args.get(m.group(1));
      if (value == null) {
        throw new IllegalArgumentException(tool + ": its arguments do not fill " + template);
      }
      m.appendReplacement(key, Matcher.quoteReplacement(String.valueOf(value)));
    }
    return m.appendTail(key).toString();
  }

  /**
   * A value as the text after {@code key=}: "-" for null; whitespace, '%' and control
   * characters percent-encoded (UTF-8), so a value never splits a token or ends a line.
   */
  static String token(Object value) {
    String text = value == null ? "" : value.toString();
    if (text.isEmpty()) {
      return "-";
    }
    boolean spelledMissing = MISSING.contains(text);
    StringBuilder out = new StringBuilder();
    text.codePoints()
        .forEach(
            cp -> {
              if (spelledMissing
                  || cp == '%'
                  || Character.isWhitespace(cp)
                  || Character.isSpaceChar(cp)
                  || Character.isISOControl(cp)) {
                for (byte b : new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8)) {
                  out.append(String.format("%%%02X", b & 0xff));
                }
              } else {
                out.appendCodePoint(cp);
              }
            });
    return out.toString();
  }

  private int execute(String sql, Object... params) throws SQLException {
    try (Connection conn = db.getConnection();
        PreparedStatement st = conn.prepareStatement(sql)) {
      for (int i = 0; i < params.length; i++) {
        st.setObject(i + 1, params[i]);
      }
      return st.executeUpdate();
    }
  }

  private static Map<String, Object> parse(String json) throws SQLException {
    try {
      return JSON.readValue(json, MAP);
    } catch (java.io.IOException e) {
      throw new SQLException("unreadable journal result: " + json, e);
    }
  }

  private interface Blocking {
    void run() throws Exception;
  }

  /** Blocking JDBC work off the caller's thread, as a Completable. */
  private static Completable io(Blocking work) {
    return Completable.fromAction(work::run).subscribeOn(Schedulers.io());
  }
}
