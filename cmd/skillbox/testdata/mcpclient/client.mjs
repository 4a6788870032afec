// A scripted MCP client built on the official TypeScript SDK: it spawns the
// server command given after "--", runs the steps in the JSON plan (argv[2])
// one after another and prints one JSON document with what it saw, for
// skillbox's end-to-end test to assert on. hack/mcp-client-deps.sh installs
// the SDK next to a copy of this file.
//
// A plan: {"elicit": "accept"|"decline"|null, "steps": [{"op": ..., ...}]}
// with ops listTools, callTool {name, arguments}, listPrompts,
// getPrompt {name, arguments}, listResources, listResourceTemplates,
// readResource {uri}, request {method, params}, writeFile {path, content}
// (a change the user makes on the host between two calls). With "roots"
// (file:// URIs) the client has the roots capability and lists them.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema, ListRootsRequestSchema, ResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { writeFileSync } from 'node:fs';

const plan = JSON.parse(process.argv[2]);
const sep = process.argv.indexOf('--');
const [command, ...args] = process.argv.slice(sep + 1);

const capabilities = plan.elicit ? { elicitation: { form: {} } } : {};
if (plan.roots) capabilities.roots = { listChanged: true };
const client = new Client({ name: 'skillbox-e2e', version: '1.0.0' }, { capabilities });
if (plan.roots) {
  client.setRequestHandler(ListRootsRequestSchema, async () => ({
    roots: plan.roots.map((uri) => ({ uri, name: 'project' })),
  }));
}
const elicitations = [];
if (plan.elicit) {
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    elicitations.push(req.params);
    return plan.elicit === 'accept' ? { action: 'accept', content: { approve: true } } : { action: plan.elicit };
  });
}

const transport = new StdioClientTransport({ command, args, stderr: 'inherit' });
await client.connect(transport);

const out = {
  serverVersion: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
  instructions: client.getInstructions(),
  results: [],
  elicitations,
};

const opts = (progress) => ({
  timeout: 120000,
  resetTimeoutOnProgress: true,
  onprogress: (p) => progress.push(p),
});

for (const step of plan.steps) {
  const progress = [];
  const rec = { op: step.op, name: step.name ?? step.uri ?? step.method };
  try {
    switch (step.op) {
      case 'listTools':
        rec.result = await client.listTools();
        break;
      case 'callTool':
        rec.result = await client.callTool({ name: step.name, arguments: step.arguments ?? {} }, undefined, opts(progress));
        break;
      case 'listPrompts':
        rec.result = await client.listPrompts();
        break;
      case 'getPrompt':
        rec.result = await client.getPrompt({ name: step.name, arguments: step.arguments ?? {} });
        break;
      case 'listResources':
        rec.result = await client.listResources();
        break;
      case 'listResourceTemplates':
        rec.result = await client.listResourceTemplates();
        break;
      case 'readResource':
        rec.result = await client.readResource({ uri: step.uri });
        break;
      case 'writeFile':
        writeFileSync(step.path, step.content);
        rec.result = {};
        break;
      case 'request':
        rec.result = await client.request({ method: step.method, params: step.params ?? {} }, ResultSchema);
        break;
      default:
        throw new Error(`unknown op ${step.op}`);
    }
  } catch (err) {
    rec.error = { message: String(err?.message ?? err), code: err?.code };
  }
  if (progress.length) rec.progress = progress;
  out.results.push(rec);
}

await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
