// Unit tests of patch-componentize.mjs: the rewritten string helper writes
// the same bytes as componentize-js 0.23.0's, and the rewrites refuse glue
// they were not written for. `npm test` in guests/js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEBUG_LOG_0_23,
  STRING_HELPER_0_23,
  STRING_HELPER_FAST,
  rewriteBindings,
} from '../patch-componentize.mjs';

// Builds a helper from its source, with the glue's encoder in scope.
function helper(source) {
  return new Function(
    'TEXT_ENCODER_UTF8',
    `${source}\nreturn _utf8AllocateAndEncode;`,
  )(new TextEncoder());
}

// A linear memory and a bump allocator, as the component gives the glue.
function memory() {
  const mem = { buffer: new ArrayBuffer(1 << 16) };
  let next = 8;
  const realloc = (old, oldSize, align, size) => {
    assert.equal(old, 0, 'the helper allocates once');
    const ptr = next;
    next += size;
    return ptr;
  };
  return { mem, realloc, allocated: () => next - 8 };
}

function lower(fn, s) {
  const { mem, realloc, allocated } = memory();
  const { ptr, len } = fn(s, realloc, mem);
  if (len > 0) assert.equal(allocated(), len, `exact allocation for ${JSON.stringify(s)}`);
  return Array.from(new Uint8Array(mem.buffer, ptr, len));
}

const samples = [
  'x',
  'hello from sluice: message 00000000000000000000000000000000 attempt 1',
  'größe',
  'naïve café – 価格 €',
  'truck 🚚 and 👩‍💻',
  'lone high \ud800 end',
  'lone low \udc00 end',
  'pair at end \ud83d\ude9a',
  'high at end \ud83d',
  '\u0000nul\u007f\u0080\u07ff\u0800\uffff',
];

test('the fast string helper writes the bytes the 0.23.0 helper writes', () => {
  const before = helper(STRING_HELPER_0_23);
  const after = helper(STRING_HELPER_FAST);
  for (const s of samples) {
    const bytes = lower(after, s);
    assert.deepEqual(bytes, lower(before, s), JSON.stringify(s));
    assert.deepEqual(bytes, Array.from(new TextEncoder().encode(s)));
  }
  const { mem, realloc } = memory();
  assert.deepEqual(after('', realloc, mem), { ptr: 1, len: 0 });
  assert.throws(() => after(42, realloc, mem), /expected a string, received \[number\]/);
});

const glue = `${STRING_HELPER_0_23}

${DEBUG_LOG_0_23}

function import_log(arg0, arg1) {
  var encodeRes = _utf8AllocateAndEncode(arg1, $realloc, $memory);
  _debugLog('[Instruction::CallWasm] enter', {
    funcName: 'get-all',
    paramCount: 3,
    async: false,
    postReturn: false,
  });
  if (arg0) _debugLog(' [Instruction::CallInterface] (sync, @ enter)');
  log(encodeRes.ptr, encodeRes.len);
}
`;

test('rewriteBindings swaps the helper and drops the tracing calls', () => {
  const out = rewriteBindings(glue);
  assert.ok(out.includes(STRING_HELPER_FAST));
  assert.ok(!out.includes(STRING_HELPER_0_23));
  assert.ok(!out.includes('_debugLog('), out);
  assert.ok(out.includes('if (arg0) void 0;'), 'a dropped call keeps its statement');
  // What is left still parses.
  assert.doesNotThrow(() => new Function(out));
  assert.equal(rewriteBindings('let x = 1;'), 'let x = 1;', 'glue without them is left alone');
});

test('rewriteBindings refuses glue it was not written for', () => {
  const otherHelper = glue.replace('let codepoints = 0;', 'let codepoints = 1;');
  assert.throws(() => rewriteBindings(otherHelper), /unknown `_utf8AllocateAndEncode` helper.*0\.23\.0/);
  const usesCodepoints = `${glue}\nconst n = encodeRes.codepoints;`;
  assert.throws(() => rewriteBindings(usesCodepoints), /a use of `codepoints`/);
  const otherDebug = glue.replace('console.debug(...args);', 'console.log(...args);');
  assert.throws(() => rewriteBindings(otherDebug), /unknown `_debugLog` helper/);
});
