// Interval timer source: emits one event per tick, with a running count kept in the source's db.
module.exports = {
  key: "timer",
  name: "Interval Timer",
  version: "1.0.0",
  description: "Emits an event on a fixed interval (default every 15 minutes)",
  props: {
    db: "$.service.db",
    timer: {
      type: "$.interface.timer",
      label: "Interval",
      default: { intervalSeconds: 900 },
    },
  },
  async run(event) {
    const count = (this.db.get("count") || 0) + 1;
    this.db.set("count", count);
    this.$emit(
      { timestamp: event.timestamp, interval_seconds: event.interval_seconds, count },
      { summary: `tick ${count}`, id: String(event.timestamp) },
    );
  },
};
