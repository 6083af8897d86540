import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { redisAnswersPing } from "../../../src/redis/embedded.js";

/**
 * The probe the embedded server's start and restart wait on (embedded.ts): whatever the peer does,
 * it answers within its half second. A real loopback TCP server plays each peer.
 */

const servers: net.Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** A loopback server whose connections get `onData(socket, received)`. */
async function peer(onData: (sock: net.Socket, data: string) => void): Promise<number> {
  const server = net.createServer((sock) => {
    sock.on("error", () => {});
    sock.on("data", (d) => onData(sock, d.toString()));
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as net.AddressInfo).port;
}

/** The probe's answer, or "no answer" after 5 s (ten times its own bound). */
function probe(port: number, password?: string): Promise<boolean | "no answer"> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    redisAnswersPing(port, password).finally(() => clearTimeout(timer)),
    new Promise<"no answer">((r) => {
      timer = setTimeout(() => r("no answer"), 5000);
    }),
  ]);
}

describe("redisAnswersPing", () => {
  it("is false when the peer reads the PING and closes the connection cleanly (a server killed mid-start)", async () => {
    const port = await peer((sock) => sock.end());
    expect(await probe(port, "secret")).toBe(false);
  });

  it("is false when the peer reads the PING and never answers", async () => {
    const port = await peer(() => {});
    expect(await probe(port)).toBe(false);
  });

  it("is false when nothing listens, and when the server refuses (LOADING, NOAUTH)", async () => {
    const closed = await peer(() => {});
    await new Promise((r) => servers.pop()?.close(r));
    expect(await probe(closed)).toBe(false);
    const loading = await peer((sock) => sock.write("-LOADING Redis is loading the dataset in memory\r\n"));
    expect(await probe(loading)).toBe(false);
  });

  it("is true when the server answers PONG after AUTH", async () => {
    const port = await peer((sock, data) => {
      if (data.includes("PING")) sock.write(`${data.startsWith("AUTH") ? "+OK\r\n" : ""}+PONG\r\n`);
    });
    expect(await probe(port, "secret")).toBe(true);
    expect(await probe(port)).toBe(true);
  });
});
