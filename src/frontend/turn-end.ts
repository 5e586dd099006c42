/**
 * Client writes gathered at the end of the event-loop turn.
 *
 * Why: a send to a client that is asleep wakes it, and on loopback and in a
 * virtual machine that wakeup (an interrupt to another CPU) costs more than
 * the send itself. Answers written the moment they are ready, between the
 * JavaScript of the turn's other requests, each find their client asleep
 * again. Written back to back once the turn's I/O callbacks have run (the
 * check phase, `setImmediate`), the first wakes a client and the rest find it
 * running. In the gateway bench that is a fifth less CPU per tiny request
 * (docs/benchmarks-history.md, "the fourth round"). The price: an answer
 * leaves after the rest of its turn's callbacks, microseconds on an idle
 * gateway, at most one turn's work under load.
 *
 * Contract: each task runs once, in the order queued, in the check phase of
 * the turn it was queued in (one queued while the queue runs waits for the
 * next turn). A task that throws does not stop the others; its `fail` gets
 * the error.
 */

interface Task {
  readonly run: () => void;
  readonly fail: (err: unknown) => void;
}

let queue: Task[] = [];

function runQueue(): void {
  const tasks = queue;
  queue = [];
  for (const t of tasks) {
    try {
      t.run();
    } catch (err) {
      t.fail(err);
    }
  }
}

/** Runs `run` at the end of this event-loop turn, with the other writes queued in it (`fail` if it throws). */
export function atTurnEnd(run: () => void, fail: (err: unknown) => void): void {
  if (queue.length === 0) setImmediate(runQueue);
  queue.push({ run, fail });
}
