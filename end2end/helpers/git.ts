import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/** A git repository with one commit on `main` (README.md), in the temporary directory: a
 *  workspace root of the suite's server (W1). Returns its canonical path. */
export function gitRepo(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const git = (...args: string[]) =>
    execFileSync("git", ["-c", "user.name=Test", "-c", "user.email=test@example.com", ...args], { cwd: dir });
  git("init", "-q", "-b", "main");
  fs.writeFileSync(path.join(dir, "README.md"), "hello\n");
  git("add", "README.md");
  git("commit", "-q", "-m", "initial");
  return fs.realpathSync(dir);
}
