// Generic HTTP source: every request to the endpoint becomes an event.
module.exports = {
  key: "http",
  name: "HTTP Requests",
  version: "1.0.0",
  description: "Emits every HTTP request sent to the source's endpoint URL",
  props: {
    http: "$.interface.http",
  },
  async run(event) {
    this.$emit(
      { method: event.method, path: event.path, query: event.query, headers: event.headers, body: event.body },
      { summary: `${event.method} ${event.path}` },
    );
  },
};
