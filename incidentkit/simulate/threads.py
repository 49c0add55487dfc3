"""JVM thread dumps in the HotSpot format ``jcmd <pid> Thread.print`` prints (JDK 21).

The header's time is the JVM host's local time without an offset; manifests say the host's zone
in ``[threads]`` (``timezone = "Europe/Berlin"``, or ``naive_timestamps = "utc"`` for UTC).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from incidentkit.simulate.model import WallClock

JDK = "java.base@21.0.5"


def jdk(frame: str) -> str:
    """``Class.method(File.java:N)`` of the JDK, with the module prefix jcmd prints."""
    method, _, where = frame.partition("(")
    return f"{method}({JDK}/{where}"


NIO_READ = (
    jdk("sun.nio.ch.Net.poll(Native Method)"),
    jdk("sun.nio.ch.NioSocketImpl.park(NioSocketImpl.java:191)"),
    jdk("sun.nio.ch.NioSocketImpl.implRead(NioSocketImpl.java:309)"),
    jdk("sun.nio.ch.NioSocketImpl.read(NioSocketImpl.java:346)"),
    jdk("java.net.Socket$SocketInputStream.read(Socket.java:1099)"),
)
"""The top of every thread waiting in a blocking socket read, whatever it waits for."""
TOOL_POOL = (
    "com.google.adk.tools.FunctionTool.call(FunctionTool.java:262)",
    jdk("java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1144)"),
    jdk("java.util.concurrent.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:642)"),
    jdk("java.lang.Thread.run(Thread.java:1583)"),
)
HTTP_BODY = (
    jdk("java.io.BufferedInputStream.read1(BufferedInputStream.java:347)"),
    jdk("sun.net.www.http.ChunkedInputStream.readAheadBlocking(ChunkedInputStream.java:560)"),
    jdk("sun.net.www.http.ChunkedInputStream.read(ChunkedInputStream.java:689)"),
)
SOCKET_READ = (
    *NIO_READ,
    *HTTP_BODY,
    "com.example.support.tools.OrderLookupClient.fetch(OrderLookupClient.java:58)",
    "com.example.support.tools.OrderLookupTool.orderLookup(OrderLookupTool.java:31)",
    *TOOL_POOL,
)
"""A tool thread blocked reading the order service's response (no read timeout)."""

PARKED_QUEUE = (
    jdk("jdk.internal.misc.Unsafe.park(Native Method)"),
    "- parking to wait for  <0x00000006c1f0a2b8> (a java.util.concurrent.locks."
    "AbstractQueuedSynchronizer$ConditionObject)",
    jdk("java.util.concurrent.locks.LockSupport.park(LockSupport.java:371)"),
    jdk("java.util.concurrent.LinkedBlockingQueue.take(LinkedBlockingQueue.java:435)"),
    jdk("java.util.concurrent.ThreadPoolExecutor.getTask(ThreadPoolExecutor.java:1070)"),
    jdk("java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1130)"),
    jdk("java.lang.Thread.run(Thread.java:1583)"),
)
KB_READ = (
    *NIO_READ,
    *HTTP_BODY,
    "com.example.support.tools.KbSearchClient.query(KbSearchClient.java:77)",
    "com.example.support.tools.KbSearchTool.kbSearch(KbSearchTool.java:29)",
    *TOOL_POOL,
)
"""A ``kb_search`` tool thread waiting for the knowledge base's reply."""
KB_PARSE = (
    "com.fasterxml.jackson.core.json.UTF8StreamJsonParser.nextFieldName"
    "(UTF8StreamJsonParser.java:1052)",
    "com.fasterxml.jackson.databind.deser.std.MapDeserializer._readAndBindStringKeyMap"
    "(MapDeserializer.java:609)",
    "com.fasterxml.jackson.databind.deser.std.MapDeserializer.deserialize(MapDeserializer.java:449)",
    "com.fasterxml.jackson.databind.ObjectMapper._readMapAndClose(ObjectMapper.java:4917)",
    "com.fasterxml.jackson.databind.ObjectMapper.readValue(ObjectMapper.java:3860)",
    "com.example.support.tools.KbSearchClient.query(KbSearchClient.java:81)",
    "com.example.support.tools.KbSearchTool.kbSearch(KbSearchTool.java:29)",
    *TOOL_POOL,
)
"""A ``kb_search`` tool thread parsing the reply it just read (RUNNABLE, not in a read)."""
KB_PARKED = (
    jdk("jdk.internal.misc.Unsafe.park(Native Method)"),
    "- parking to wait for  <0x00000006c1f3d540> (a java.util.concurrent.locks."
    "AbstractQueuedSynchronizer$ConditionObject)",
    *PARKED_QUEUE[2:],
)
"""An idle ``kb_search`` pool thread waiting for work on its own queue."""
AUDIT_FEED = (
    *NIO_READ,
    jdk("java.io.BufferedInputStream.fill(BufferedInputStream.java:291)"),
    jdk("java.io.BufferedInputStream.read(BufferedInputStream.java:308)"),
    jdk("java.io.DataInputStream.readInt(DataInputStream.java:381)"),
    "com.example.support.audit.AuditFeedListener.awaitNext(AuditFeedListener.java:73)",
    "com.example.support.audit.AuditFeedListener.run(AuditFeedListener.java:41)",
    jdk("java.lang.Thread.run(Thread.java:1583)"),
)
"""A listener blocked by design on a long-lived socket until the audit feed sends a record."""
SERVING = (
    jdk("java.util.HashMap.putVal(HashMap.java:641)"),
    "com.fasterxml.jackson.databind.deser.std.MapDeserializer._readAndBindStringKeyMap"
    "(MapDeserializer.java:609)",
    "com.example.support.web.ChatController.stream(ChatController.java:88)",
    "org.apache.tomcat.util.net.SocketProcessorBase.run(SocketProcessorBase.java:52)",
    jdk("java.lang.Thread.run(Thread.java:1583)"),
)
RX_WORKING = (
    "io.reactivex.rxjava3.internal.operators.flowable.FlowableConcatMap$ConcatMapImmediate."
    "drain(FlowableConcatMap.java:335)",
    "io.reactivex.rxjava3.internal.schedulers.ScheduledRunnable.run(ScheduledRunnable.java:65)",
    jdk("java.util.concurrent.FutureTask.run(FutureTask.java:317)"),
    jdk("java.lang.Thread.run(Thread.java:1583)"),
)
RX_IDLE = (
    jdk("jdk.internal.misc.Unsafe.park(Native Method)"),
    "- parking to wait for  <0x00000006c2b04e10> (a java.util.concurrent.locks."
    "AbstractQueuedSynchronizer$ConditionObject)",
    jdk("java.util.concurrent.locks.LockSupport.parkNanos(LockSupport.java:269)"),
    jdk(
        "java.util.concurrent.ScheduledThreadPoolExecutor$DelayedWorkQueue.take"
        "(ScheduledThreadPoolExecutor.java:1182)"
    ),
    jdk("java.lang.Thread.run(Thread.java:1583)"),
)
EPOLL = (
    "io.netty.channel.epoll.Native.epollWait(Native Method)",
    "io.netty.channel.epoll.EpollEventLoop.run(EpollEventLoop.java:408)",
    "io.netty.util.concurrent.SingleThreadEventExecutor$4.run(SingleThreadEventExecutor.java:997)",
    jdk("java.lang.Thread.run(Thread.java:1583)"),
)
MAIN = (
    jdk("jdk.internal.misc.Unsafe.park(Native Method)"),
    "- parking to wait for  <0x00000006c0a1b2c8> (a java.util.concurrent.CountDownLatch$Sync)",
    jdk("java.util.concurrent.CountDownLatch.await(CountDownLatch.java:276)"),
    "com.example.support.AgentServer.main(AgentServer.java:44)",
)
REFERENCE = (
    jdk("java.lang.ref.Reference.waitForReferencePendingList(Native Method)"),
    jdk("java.lang.ref.Reference.processPendingReferences(Reference.java:246)"),
    jdk("java.lang.ref.Reference$ReferenceHandler.run(Reference.java:208)"),
)
VM_THREADS = ("VM Thread", "GC Thread#0", "GC Thread#1", "G1 Main Marker", "G1 Conc#0")

STATES = {
    "RUNNABLE": "runnable",
    "WAITING (parking)": "waiting on condition",
    "TIMED_WAITING (parking)": "waiting on condition",
}


@dataclass(frozen=True)
class JThread:
    """One Java thread in one dump."""

    name: str
    number: int
    nid: int
    daemon: bool
    state: str
    frames: tuple[str, ...]
    cpu_ms: float


@dataclass(frozen=True)
class Dump:
    """One ``jcmd Thread.print`` output taken at ``taken`` (epoch ms, whole seconds)."""

    file: str
    taken: int
    started: int  # JVM start, for elapsed=
    threads: tuple[JThread, ...]

    @property
    def rows(self) -> int:
        """Thread entries in the dump (Java threads and VM threads)."""
        return len(self.threads) + len(VM_THREADS)


def render(dump: Dump, rng: random.Random, *, zone: str = "UTC") -> str:
    """The dump's text, byte for byte what jcmd prints on a host in ``zone`` (addresses drawn
    from ``rng``)."""
    elapsed = (dump.taken - dump.started) / 1000
    addresses = [f"0x00007f2e{rng.getrandbits(24):06x}00" for _ in dump.threads]
    lines = [
        "4711:",
        WallClock(zone).dump_time(dump.taken),
        "Full thread dump OpenJDK 64-Bit Server VM (21.0.5+11-LTS mixed mode, sharing):",
        "",
        "Threads class SMR info:",
        f"_java_thread_list=0x00007f2d8c00a1b0, length={len(dump.threads)}, elements={{",
    ]
    for i in range(0, len(addresses), 4):
        tail = "," if i + 4 < len(addresses) else ""
        lines.append(", ".join(addresses[i : i + 4]) + tail)
    lines += ["}", ""]
    for thread, tid in zip(dump.threads, addresses, strict=True):
        daemon = " daemon" if thread.daemon else ""
        lines.append(
            f'"{thread.name}" #{thread.number} [{thread.nid}]{daemon} prio=5 os_prio=0 '
            f"cpu={thread.cpu_ms:.2f}ms elapsed={elapsed:.2f}s tid={tid} nid={thread.nid} "
            f"{STATES[thread.state]}  [0x00007f2d{rng.getrandbits(20):05x}000]"
        )
        lines.append(f"   java.lang.Thread.State: {thread.state}")
        for frame in thread.frames:
            lines.append(f"\t{frame}" if frame.startswith("- ") else f"\tat {frame}")
        lines.append("")
    for nid, name in enumerate(VM_THREADS, start=9):
        lines.append(
            f'"{name}" os_prio=0 cpu={rng.uniform(5, 900):.2f}ms elapsed={elapsed:.2f}s '
            f"tid=0x00007f2e{rng.getrandbits(24):06x}00 nid={nid} runnable  "
        )
        lines.append("")
    lines += ["JNI global refs: 31, weak refs: 0", ""]
    return "\n".join(lines)
