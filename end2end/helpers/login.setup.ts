import { test as setup, expect } from "@playwright/test";
import * as fs from "node:fs";
import * as path from "node:path";
import { authFile, baseURL, token } from "../playwright.config";

// One login for the whole suite: the token through the login form, as a browser sends it.
// The cookie it sets opens every server started with the same token.
setup("log in", async ({ request }) => {
  const r = await request.post(`${baseURL}/login`, {
    form: { token, next: "/" },
    headers: { origin: baseURL },
    maxRedirects: 0,
  });
  expect(r.status(), await r.text()).toBe(303);
  fs.mkdirSync(path.dirname(authFile), { recursive: true });
  await request.storageState({ path: authFile });
});
