"""JVM thread dumps in the HotSpot format ``jcmd <pid> Thread.print`` prints (JDK 21).

The header's time is the JVM host's local time without an offset; simulated hosts run in UTC,
so manifests say ``naive_timestamps = "utc"`` in ``[threads]``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from incidentkit.simulate.model import BASE_MS

JDK = "java.base@21.0.5"


def jdk(frame: str) -> str:
    """``Class.method(File.java:N)`` of the JDK, with the module prefix jcmd prints."""
    method, _, where = frame.partition("(")
    return f"{method}({JDK}/{where}"


SOCKET_READ = (
    jdk("sun.nio.ch.Net.poll(Native Method)"),
    jdk("sun.nio.ch.NioSocketImpl.park(NioSocketImpl.java:191)"),
    jdk("sun.nio.ch.NioSocketImpl.implRead(NioSocketImpl.java:309)"),
    jdk("sun.nio.ch.NioSocketImpl.read(NioSocketImpl.java:346)"),
    jdk("java.net.Socket$SocketInputStream.read(Socket.java:1099)"),
    jdk("java.io.BufferedInputStream.read1(BufferedInputStream.java:347)"),
    jdk("sun.net.www.http.ChunkedInputStream.readAheadBlocking(ChunkedInputStream.java:560)"),
    jdk("sun.net.www.http.ChunkedInputStream.read(ChunkedInputStream.java:689)"),
    "com.example.support.tools.OrderLookupClient.fetch(OrderLookupClient.java:58)",
    "com.example.support.tools.OrderLookupTool.orderLookup(OrderLookupTool.java:31)",
    "com.google.adk.tools.FunctionTool.call(FunctionTool.java:262)",
    jdk("java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1144)"),
    jdk("java.util.concurrent.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:642)"),
    jdk("java.lang.Thread.run(Thread.java:1583)"),
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


def render(dump: Dump, rng: random.Random) -> str:
    """The dump's text, byte for byte what jcmd prints (addresses drawn from ``rng``)."""
    seconds = (dump.taken - BASE_MS) // 1000
    hh, mm, ss = seconds // 3600, seconds // 60 % 60, seconds % 60
    elapsed = (dump.taken - dump.started) / 1000
    addresses = [f"0x00007f2e{rng.getrandbits(24):06x}00" for _ in dump.threads]
    lines = [
        "4711:",
        f"2026-11-29 {hh:02d}:{mm:02d}:{ss:02d}",
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
