import { test, expect } from "@playwright/test";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

test("A4: an agent that needs a login shows why; after the login, Retry sends the prompt", async ({ page, request }) => {
  const presets: { id: string; command: string }[] = (await (await request.get("/api/v1/agent-presets")).json()).agent_presets;
  const mock = presets.find((p) => p.id === "mock")!;
  const credentials = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "mock-login-")), "credentials");
  const profile = await (
    await request.post("/api/v1/agent-profiles", {
      data: { name: `needs a login ${Date.now()}`, command: mock.command, env: { MOCK_AGENT_AUTH_REQUIRED: credentials } },
    })
  ).json();
  const task = await (
    await request.post("/api/v1/tasks", {
      data: { title: `Login ${Date.now()}`, prompt: 'e2e:message("sent after the login")', agent_profile_id: profile.id },
    })
  ).json();

  await page.goto(`/t/${task.id}`);
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.locator(".last-error")).toContainText("Mock login: Run `mock_agent login` in a terminal");
  fs.writeFileSync(credentials, "logged in");
  await page.getByTestId("session-retry").click();
  await expect(page.locator(".chat-message.agent").filter({ hasText: "sent after the login" })).toBeVisible();
  await expect(page.locator(".last-error")).toHaveCount(0);
});
