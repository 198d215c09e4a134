import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { token } from "../playwright.config";

/** `fetch` with the suite's access token as a bearer (every server needs it, loopback too). */
export function authedFetch(url: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${token}`);
  return fetch(url, { ...init, headers });
}

/** A free TCP port on 127.0.0.1 (asked from the kernel). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A Turnstile server of the test's own (its own port and data directory), for tests that stop
 * and restart it or fill it with thousands of tasks. Data lives in /dev/shm when it exists.
 */
export class OwnServer {
  private child: ChildProcess | null = null;
  readonly dataDir: string;

  private constructor(readonly port: number, env: Record<string, string>) {
    const base = fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir();
    this.dataDir = fs.mkdtempSync(path.join(base, "turnstile-e2e-own-"));
    this.env = env;
  }
  private readonly env: Record<string, string>;

  static async start(env: Record<string, string> = {}): Promise<OwnServer> {
    const server = new OwnServer(await freePort(), env);
    await server.up();
    return server;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Starts the process and waits until /healthz answers. */
  async up(): Promise<void> {
    const binary = path.resolve(__dirname, "../../target/debug/turnstile");
    this.log = "";
    this.child = spawn(binary, ["--addr", `127.0.0.1:${this.port}`, "--data-dir", this.dataDir], {
      env: {
        ...process.env,
        LEPTOS_SITE_ROOT: path.resolve(__dirname, "../../target/site"),
        RUST_LOG: "warn,turnstile=info",
        ACCESS_TOKEN: token,
        ...this.env,
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    this.child.stdout?.on("data", (chunk: Buffer) => {
      this.log += chunk.toString();
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (this.child.exitCode !== null) throw new Error(`turnstile exited with ${this.child.exitCode}`);
      try {
        const r = await fetch(`${this.url}/healthz`);
        if (r.ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error("turnstile did not become healthy in 30 s");
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** What the server logged since it last started. */
  log = "";

  /** The one-time login link of the server's start-up line. */
  loginLink(): string {
    const line = this.log.split("\n").find((l) => l.includes("turnstile listening"));
    const url = line?.match(/url=(\S+)/)?.[1];
    if (!url) throw new Error(`no login link in the log: ${this.log}`);
    return url;
  }

  /** Stops the process (SIGTERM) and waits for it to exit. */
  async down(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
    this.child = null;
  }

  async stop(): Promise<void> {
    await this.down();
    fs.rmSync(this.dataDir, { recursive: true, force: true });
  }
}
