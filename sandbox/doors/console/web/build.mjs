// Builds dist/ from src/: one bundle (app.js), the stylesheet and the page.
// The output depends only on the sources and the locked esbuild, so a
// rebuild of a clean checkout is byte-identical (`make console-check`).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";

rmSync("dist", { recursive: true, force: true });
mkdirSync("dist");
await build({
  entryPoints: ["src/main.ts"],
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  legalComments: "none",
  charset: "utf8",
  outfile: "dist/app.js",
  logLevel: "warning",
});
copyFileSync("src/index.html", "dist/index.html");
copyFileSync("src/app.css", "dist/app.css");
