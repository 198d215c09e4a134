import { test, expect } from "@playwright/test";
import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

// The release binary runs from any directory (decision 0050): installed with `cargo install`,
// copied with its mock agent into an empty directory, started there with no LEPTOS_* variable,
// it serves the board with its scripts, and the wasm as stored at build time (brotli or gzip)
// when the browser asks for it.
// scripts/test.sh builds and installs it and names it in E2E_RELEASE_BINARY (the bundle it
// was built with in E2E_SITE_ROOT).

const token = "e2e-release-token-0123456789";
let child: ChildProcess | null = null;
let base = "";

test.beforeAll(async () => {
  const built = process.env.E2E_RELEASE_BINARY;
  expect(built, "E2E_RELEASE_BINARY names the release binary").toBeTruthy();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "turnstile-relocated-"));
  for (const name of ["turnstile", "mock_agent"]) {
    fs.copyFileSync(path.join(path.dirname(built!), name), path.join(dir, name));
    fs.chmodSync(path.join(dir, name), 0o755);
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("LEPTOS_") && v !== undefined) env[k] = v;
  }
  env.ACCESS_TOKEN = token;
  env.RUST_LOG = "info";
  child = spawn(path.join(dir, "turnstile"), ["--addr", "127.0.0.1:0", "--data-dir", path.join(dir, "data")], {
    cwd: dir,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stdout!.on("data", (d) => (log += d.toString()));
  child.stderr!.on("data", (d) => (log += d.toString()));
  // The start-up line names the port it bound.
  const deadline = Date.now() + 30_000;
  while (!/turnstile listening.*addr=127\.0\.0\.1:(\d+)/.test(log)) {
    expect(Date.now() < deadline, `the server did not start: ${log}`).toBe(true);
    await new Promise((r) => setTimeout(r, 50));
  }
  base = `http://127.0.0.1:${/addr=127\.0\.0\.1:(\d+)/.exec(log)![1]}`;
  expect(log).not.toContain("no browser bundle");
});

test.afterAll(() => {
  child?.kill("SIGKILL");
});

test("the release binary, moved elsewhere, serves the board with its scripts", async ({ page, request }) => {
  const login = await page.request.post(`${base}/login`, {
    form: { token, next: "/" },
    headers: { origin: base },
    maxRedirects: 0,
  });
  expect(login.status()).toBe(303);
  await page.goto(`${base}/`);
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");

  const wasm = await request.get(`${base}/pkg/turnstile_bg.wasm`, {
    headers: { authorization: `Bearer ${token}`, "accept-encoding": "br" },
  });
  expect(wasm.status()).toBe(200);
  expect(wasm.headers()["content-encoding"]).toBe("br");
  expect(wasm.headers()["content-type"]).toBe("application/wasm");
  // Sent as stored at build time (best ratio), not compressed per request: the length is the
  // stored file's.
  const site = path.join(process.env.E2E_SITE_ROOT ?? "../target/site", "pkg");
  const stored = (suffix: string) => String(fs.statSync(path.join(site, `turnstile_bg.wasm${suffix}`)).size);
  expect(wasm.headers()["content-length"]).toBe(stored(".br"));
  const gz = await request.get(`${base}/pkg/turnstile_bg.wasm`, {
    headers: { authorization: `Bearer ${token}`, "accept-encoding": "gzip" },
  });
  expect(gz.headers()["content-encoding"]).toBe("gzip");
  expect(gz.headers()["content-length"]).toBe(stored(".gz"));
  const plain = await request.get(`${base}/pkg/turnstile_bg.wasm`, {
    headers: { authorization: `Bearer ${token}`, "accept-encoding": "identity" },
  });
  expect(plain.headers()["content-encoding"]).toBeUndefined();
  expect(plain.headers()["content-length"]).toBe(stored(""));
});
