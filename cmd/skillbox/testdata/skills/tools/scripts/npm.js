// npm ships in the node image. It may write a log or cache under $HOME; the
// sandbox's /tmp is writable.
const { execFileSync } = require("child_process");
const v = execFileSync("npm", ["--version"], { env: { ...process.env, HOME: "/tmp" } }).toString().trim();
console.log("npm " + v);
console.log("node " + process.version);
