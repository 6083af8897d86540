/**
 * Guest code (part of the prelude, see guest-prelude.ts): `setTimeout`, `setInterval`,
 * `setImmediate` and their `clear*`.
 *
 * The timers live here, in the guest. The host keeps a single wake-up per run (HostBridge.wake):
 * the guest asks for one only when a new timer is due before the wake-up already asked for, and
 * when it fires, one entry into the isolate (`dispatch("tick")`) runs every timer then due and
 * answers when the next one is. Before, every firing was its own entry into the isolate with its
 * own isolated-vm `timeout`; ten 1 ms intervals armed about 90 000 such timeouts, all due at the
 * run's deadline, and isolated-vm's timer thread then crashed the daemon with SIGSEGV (isolated-vm
 * issue #572). Firings are also capped per run (`maxTimerFiringsPerRun`): past it the run ends
 * with TIMER_LIMIT, and the host enforces the same cap on its wake-ups.
 */
export const GUEST_TIMERS_SOURCE = `
const timers = new Map();
const mapForEach = uncurry(Map.prototype.forEach);
const mapClear = uncurry(Map.prototype.clear);
const mapSize = uncurry(Object.getOwnPropertyDescriptor(Map.prototype, "size").get);
const reflectApply = Reflect.apply;
// When the host will next call tick (Infinity: no wake-up asked for).
let wakeAt = Infinity;
let ticking = false;
let firings = 0;
// The error that stopped all timers (the firing limit); new timers throw it.
let timersStopped = null;

function timerLimitError() {
  const e = new Error("the run fired more than " + limits.maxTimerFiringsPerRun +
    " timer callbacks (setTimeout, setInterval, setImmediate), the limit per run");
  e.code = "TIMER_LIMIT";
  return e;
}

function startTimer(fn, ms, args, repeat, immediate) {
  if (typeof fn !== "function") throw new TypeError("the callback must be a function");
  if (timersStopped) throw timersStopped;
  if (mapSize(timers) >= K.maxPendingTimers) throw new Error("timers: at most " + K.maxPendingTimers + " pending timers per run");
  const delay = Math.min(Math.max(repeat ? 1 : 0, Number(ms) || 0), 2147483647);
  const due = dateNow() + delay;
  // Within a tick the host is told the next due time when the tick ends.
  if (!ticking && due < wakeAt) {
    host("wake", delay);
    wakeAt = due;
  }
  const id = nextId++;
  mapSet(timers, id, { fn, args, repeat, delay, due, immediate: immediate === true });
  return id;
}
/** A new run starts with no timers and a fresh firing count (the previous run's are dropped). */
function resetTimers() {
  mapClear(timers);
  wakeAt = Infinity;
  ticking = false;
  firings = 0;
  timersStopped = null;
}
function clearTimer(id) {
  mapDelete(timers, id);
}
globalThis.setTimeout = (fn, ms, ...args) => startTimer(fn, ms, args, false);
globalThis.setInterval = (fn, ms, ...args) => startTimer(fn, ms, args, true);
globalThis.setImmediate = (fn, ...args) => startTimer(fn, 0, args, false, true);
globalThis.clearTimeout = clearTimer;
globalThis.clearInterval = clearTimer;
globalThis.clearImmediate = clearTimer;
globalThis.queueMicrotask = (fn) => { Promise.resolve().then(fn).catch((e) => failRun(e)); };

/**
 * Runs the timers due now, immediates first, then earliest first; timers they create wait for the next tick. Answers
 * the delay until the next timer is due, or -1 when none is pending.
 */
async function tick() {
  wakeAt = Infinity;
  ticking = true;
  try {
    const now = dateNow();
    const due = [];
    mapForEach(timers, (t, id) => { if (t.due <= now) arrayPush(due, [id, t]); });
    // Immediates first, then by due time: a loaded machine that reaches a tick late (a 10 ms
    // timer already due) must not reorder setImmediate after it.
    due.sort((a, b) => (b[1].immediate ? 1 : 0) - (a[1].immediate ? 1 : 0) || a[1].due - b[1].due || a[0] - b[0]);
    for (const [id, t] of due) {
      if (mapGet(timers, id) !== t) continue; // cleared by an earlier callback
      if (++firings > limits.maxTimerFiringsPerRun) {
        timersStopped = timerLimitError();
        mapClear(timers);
        failRun(timersStopped);
        return -1;
      }
      if (t.repeat) t.due = dateNow() + t.delay;
      else mapDelete(timers, id);
      // An exception in a timer callback fails the run, as it would crash a Node process.
      try { reflectApply(t.fn, undefined, t.args); } catch (e) { failRun(e); }
      // The promise callbacks this timer started run before the next timer, as in Node.
      await undefined;
    }
  } finally {
    ticking = false;
  }
  let next = Infinity;
  mapForEach(timers, (t) => { if (t.due < next) next = t.due; });
  if (next === Infinity) return -1;
  wakeAt = next;
  return Math.max(0, next - dateNow());
}
`;
