#!/usr/bin/env node
// Print a greeting and the arguments received, as one JSON object.
'use strict';

const args = process.argv.slice(2);
const out = {
  greeting: `Hello from Node ${process.version}`,
  args,
  argc: args.length,
};
process.stdout.write(JSON.stringify(out) + '\n');
