import { defineConfig, devices } from "@playwright/test";
import * as os from "node:os";
import * as path from "node:path";

// scripts/test.sh picks a free port and a fresh data directory; the fallbacks serve a manual
// `npx playwright test` after scripts/build.sh.
const port = Number(process.env.E2E_PORT ?? 3107);
export const dataDir = process.env.E2E_DATA_DIR ?? path.join(os.tmpdir(), `turnstile-e2e-${port}`);
export const baseURL = `http://127.0.0.1:${port}`;
// Every server needs its access token, on loopback too. The servers of the suite share this
// one, so one login (the `setup` project) opens them all: the cookie is derived from it.
export const token = "e2e-token-0123456789abcdef";
export const authFile = path.join(__dirname, "test-results", ".auth", "state.json");
// A second server with another token, bound to every interface as when Turnstile is used from
// a phone on the LAN (the tests reach it over loopback, which needs the token too).
export const lanPort = Number(process.env.E2E_LAN_PORT ?? port + 1);
export const lanToken = "e2e-lan-token-0123456789";

const chromium = {
  // Debian's Chromium: Playwright never downloads a browser here (design/toolchain.md).
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
};

export default defineConfig({
  testDir: "./tests",
  timeout: 30_000,
  expect: { timeout: 10_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  use: { baseURL, trace: "retain-on-failure" },
  projects: [
    // Logs in once (POST /login with the token) and keeps the cookie for every other project.
    { name: "setup", testDir: "./helpers", testMatch: /login\.setup\.ts/ },
    {
      name: "desktop",
      testDir: "./tests/desktop",
      dependencies: ["setup"],
      use: { ...devices["Desktop Chrome"], launchOptions: chromium, storageState: authFile },
    },
    // Only when scripts/test.sh names a release build (`--project release`, after the suite).
    ...(process.env.E2E_RELEASE_BINARY
      ? [
          {
            name: "release",
            testDir: "./tests/release",
            use: { ...devices["Desktop Chrome"], launchOptions: chromium },
          },
        ]
      : []),
    {
      name: "mobile",
      testDir: "./tests/mobile",
      dependencies: ["setup"],
      use: { ...devices["Pixel 7"], launchOptions: chromium, storageState: authFile },
    },
  ],
  webServer: [
    {
      command: `../target/debug/turnstile --addr 127.0.0.1:${port} --data-dir ${dataDir}`,
      url: `${baseURL}/healthz`,
      // W1: the tests' repositories are made in the temporary directory.
      env: { LEPTOS_SITE_ROOT: "../target/site", RUST_LOG: "warn", ACCESS_TOKEN: token, TURNSTILE_WORKSPACE_ROOT: os.tmpdir() },
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: "ignore",
      stderr: "pipe",
    },
    {
      command: `../target/debug/turnstile --addr 0.0.0.0:${lanPort} --data-dir ${dataDir}-lan`,
      url: `http://127.0.0.1:${lanPort}/healthz`,
      env: { LEPTOS_SITE_ROOT: "../target/site", RUST_LOG: "warn", ACCESS_TOKEN: lanToken },
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: "ignore",
      stderr: "pipe",
    },
  ],
});
