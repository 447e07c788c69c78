// Speeds up the JS bindings that componentize-js 0.23.0 generates for a WIT
// world, by patching the installed package:
//
//     node patch-componentize.mjs node_modules/@bytecodealliance/componentize-js
//
// componentize-js writes JS glue that lifts and lowers every WIT value, and
// the engine inside the component runs it in an interpreter (no JIT in
// WebAssembly). Two parts of that glue cost more than the handler itself:
//
// 1. Lowering a string (every `log` line, `publish` queue and header,
//    `config.get` key) counted its UTF-8 length in a JS loop before
//    encoding: about 0.2 µs per character, 13 µs for the `hello` log line.
//    The replacement lets the engine's native TextEncoder do the work and
//    copies the bytes: the same bytes, in one call.
// 2. Debug tracing: every call of an import or export called `_debugLog`
//    twice with a fresh object, and `_debugLog` looked up
//    `globalThis.process.env.JCO_DEBUG`, a name StarlingMonkey never defines,
//    so it never printed. The calls are dropped and the helper is a no-op.
//
// Each rewrite matches the exact text componentize-js 0.23.0 generates and
// fails the build if it changed, rather than patching something else. The
// patch is idempotent: a package patched by this same file is left alone;
// one patched by another version of it must be reinstalled (`npm ci`).
//
// The module also exports `rewriteBindings` for its unit tests
// (guests/js/test/patch-componentize.test.mjs in sluice). The patched
// componentize-js imports a copy of this file (src/sluice-bindings.mjs) and
// calls it on the generated glue.

import { createHash } from 'node:crypto';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const COMPONENTIZE_JS_VERSION = '0.23.0';

/** The string-lowering helper exactly as componentize-js 0.23.0 emits it. */
export const STRING_HELPER_0_23 = `function _utf8AllocateAndEncode(s, realloc, memory) {
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) { return { ptr: 1, len: 0 }; }
  // Compute the exact allocation size up front. Some older preview1
  // adapters only support an initial allocation, not a subsequent shrink.
  let len = 0;
  let codepoints = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    codepoints++;
    if (ch < 0x80) { len += 1; }
    else if (ch < 0x800) { len += 2; }
    else if (ch >= 0xd800 && ch <= 0xdbff &&
    i + 1 < s.length &&
    (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      len += 4;
      i++;
    } else { len += 3; }
  }
  const ptr = realloc(0, 0, 1, len);
  const { read, written } = TEXT_ENCODER_UTF8.encodeInto(
  s,
  new Uint8Array(memory.buffer, ptr, len),
  );
  if (read !== s.length || written !== len) {
    throw new Error('failed to encode whole string');
  }
  const res = { ptr, len, codepoints };
  return res;
}`;

/**
 * The replacement: still one exact-size allocation (the encoded bytes are
 * known before `realloc`), and lone surrogates become U+FFFD as before.
 * No caller reads `codepoints` (checked in `rewriteBindings`).
 */
export const STRING_HELPER_FAST = `function _utf8AllocateAndEncode(s, realloc, memory) {
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) { return { ptr: 1, len: 0 }; }
  // sluice: encode natively, then copy (patch-componentize.mjs).
  const bytes = TEXT_ENCODER_UTF8.encode(s);
  const len = bytes.length;
  const ptr = realloc(0, 0, 1, len);
  new Uint8Array(memory.buffer, ptr, len).set(bytes);
  return { ptr, len };
}`;

export const DEBUG_LOG_0_23 = `const _debugLog = (...args) => {
  if (!globalThis?.process?.env?.JCO_DEBUG) { return; }
  console.debug(...args);
};`;

export const DEBUG_LOG_NOOP = 'const _debugLog = () => {}; // sluice: tracing off (patch-componentize.mjs)';

// A call with literal arguments only: a string, then optionally an object of
// `key: literal` pairs (WIT names may hold `-`, `.`, `[`, `]`), as the
// generator writes them. Its arguments have no side effects, so `void 0` in
// its place changes nothing but the cost, and keeps the statement where it
// was (e.g. the body of an `if`).
const DEBUG_LOG_CALL = /_debugLog\('(?:[^'\\\n]|\\.)*'(?:,\s*\{[\s\w:',.\-[\]]*\})?\)/g;

/** Rewrites generated glue; throws if it is not what 0.23.0 generates. */
export function rewriteBindings(js) {
  const fail = (what) => {
    throw new Error(
      `sluice patch-componentize.mjs: ${what} in the bindings componentize-js generated; ` +
        `this patch is written for componentize-js ${COMPONENTIZE_JS_VERSION} exactly ` +
        '(pinned in package.json): update the patch for the installed version or reinstall that one',
    );
  };
  if (js.includes('function _utf8AllocateAndEncode(')) {
    if (!js.includes(STRING_HELPER_0_23)) fail('unknown `_utf8AllocateAndEncode` helper');
    js = js.replace(STRING_HELPER_0_23, () => STRING_HELPER_FAST);
    if (/\bcodepoints\b/.test(js)) fail('a use of `codepoints`');
  }
  if (js.includes('_debugLog')) {
    if (!js.includes(DEBUG_LOG_0_23)) fail('unknown `_debugLog` helper');
    js = js.replace(DEBUG_LOG_0_23, () => DEBUG_LOG_NOOP);
    js = js.replace(DEBUG_LOG_CALL, 'void 0');
  }
  return js;
}

// --- patching the installed package -----------------------------------------

// Where componentize.js has the generated glue in `jsBindings`.
const ANCHOR = `  let { wasm, jsBindings, exports, imports } = splicer.spliceBindings(
    await readFile(engine),
    [...features],
    witWorld,
    maybeWindowsPath(witPath),
    worldName,
    false,
  );
`;

function patch(pkgDir) {
  const self = fileURLToPath(import.meta.url);
  const tag = createHash('sha256').update(readFileSync(self)).digest('hex').slice(0, 16);
  const marker = `// sluice patch ${tag}`;
  const die = (msg) => {
    console.error(`patch-componentize.mjs: ${msg}`);
    process.exit(1);
  };

  let pkg;
  try {
    pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  } catch (e) {
    die(`cannot read ${join(pkgDir, 'package.json')} (${e.message}): install the dependencies first (npm ci)`);
  }
  if (pkg.name !== '@bytecodealliance/componentize-js' || pkg.version !== COMPONENTIZE_JS_VERSION) {
    die(`${pkgDir} holds ${pkg.name} ${pkg.version}, but this patch is for @bytecodealliance/componentize-js ${COMPONENTIZE_JS_VERSION}`);
  }
  const main = join(pkgDir, 'src', 'componentize.js');
  const source = readFileSync(main, 'utf8');
  if (source.includes(marker)) return 'already patched';
  if (source.includes('// sluice patch ')) {
    die(`${main} was patched by another version of this script: reinstall it (rm -rf node_modules && npm ci) and run this again`);
  }
  if (source.split(ANCHOR).length !== 2) {
    die(`${main} does not contain the expected spliceBindings call once: is it componentize-js ${COMPONENTIZE_JS_VERSION} unmodified?`);
  }
  copyFileSync(self, join(pkgDir, 'src', 'sluice-bindings.mjs'));
  const patched = source.replace(
    ANCHOR,
    () =>
      `${ANCHOR}  ${marker}: faster generated glue, see sluice-bindings.mjs\n` +
      `  jsBindings = (await import('./sluice-bindings.mjs')).rewriteBindings(jsBindings);\n`,
  );
  writeFileSync(main, patched);
  return 'patched';
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const dir = process.argv[2];
  if (!dir) {
    console.error('usage: node patch-componentize.mjs node_modules/@bytecodealliance/componentize-js');
    process.exit(2);
  }
  console.log(`patch-componentize.mjs: ${dir}: ${patch(resolve(dir))}`);
}
