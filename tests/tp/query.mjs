// Runs SQL against a trace with the real Perfetto trace processor (v52,
// WebAssembly) fetched by scripts/setup-test-deps.sh into
// .cache/trace_processor/. Node >= 20, no npm packages.
//
// Usage:
//   node tests/tp/query.mjs [--stats] TRACE_FILE [SQL ...]
//
// Prints one JSON object per line on stdout:
//   --stats first (if given): the `stats` rows with value > 0, columns
//     name, idx, severity, source, value
//   then one line per SQL, in order:
//     {"columns":[...],"rows":[[...],...],"error":null|"message"}
//
// Cell values: NULL -> null; strings -> JSON strings; doubles -> JSON numbers
// (NaN/Infinity/-Infinity as those strings); int64 -> JSON numbers when
// |v| <= 2^53 - 1, otherwise decimal strings (e.g. "-9223372036854775808");
// blobs -> {"blob": "<base64>"}.
//
// Exit status: 0 when the trace loaded (individual SQL errors are reported in
// "error"); 2 with a one-line message on stderr if the trace processor is
// missing, the trace cannot be read or the trace processor rejects it.
// Set TP_VERBOSE=1 to see the trace processor's own log on stderr.
//
// How it works: engine_bundle.js (the Perfetto UI's engine worker) is loaded
// into a `vm` context that looks like a web worker. Its emscripten glue
// fetches the wasm with a synchronous XMLHttpRequest, which we fake from disk.
// We then hand it a message port and talk the TraceProcessorRpcStream
// protocol (protos/perfetto/trace_processor/trace_processor.proto), encoding
// and decoding the few protobuf messages by hand. The wasm answers
// synchronously, inside each postMessage.

import fs from "node:fs";
import path from "node:path";
import vm from "node:vm";
import { fileURLToPath } from "node:url";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const TP_DIR = path.join(REPO, ".cache", "trace_processor");
const CHUNK = 32 * 1024 * 1024;

// TraceProcessorRpc.TraceProcessorMethod
const TPM_APPEND_TRACE_DATA = 1;
const TPM_FINALIZE_TRACE_DATA = 2;
const TPM_QUERY_STREAMING = 3;

const STATS_SQL =
  "SELECT name, idx, severity, source, value FROM stats WHERE value > 0 ORDER BY name, idx";

function die(msg) {
  process.stderr.write(`query.mjs: ${msg.replace(/\s+/g, " ").trim()}\n`);
  process.exit(2);
}

// ---------------------------------------------------------------- protobuf --

function varintBytes(v) {
  // v: non-negative Number (< 2^53) or BigInt.
  const out = [];
  let b = BigInt(v);
  if (b < 0n) b = BigInt.asUintN(64, b);
  do {
    let byte = Number(b & 0x7fn);
    b >>= 7n;
    if (b !== 0n) byte |= 0x80;
    out.push(byte);
  } while (b !== 0n);
  return out;
}

function tag(field, wireType) {
  return varintBytes((field << 3) | wireType);
}

// One length-delimited field: key, length, bytes.
function lengthDelimited(field, bytes) {
  const head = [...tag(field, 2), ...varintBytes(bytes.length)];
  const out = new Uint8Array(head.length + bytes.length);
  out.set(head, 0);
  out.set(bytes, head.length);
  return out;
}

// Encodes one TraceProcessorRpcStream.msg frame (field 1, length-delimited)
// holding TraceProcessorRpc { seq = 1; request = 2; <argField> = <argBytes> }.
function rpcFrame(seq, method, argField, argBytes) {
  const head = [...tag(1, 0), ...varintBytes(seq), ...tag(2, 0), ...varintBytes(method)];
  let argHead = [];
  if (argField !== undefined) argHead = [...tag(argField, 2), ...varintBytes(argBytes.length)];
  const innerLen = head.length + argHead.length + (argBytes ? argBytes.length : 0);
  const frameHead = [...tag(1, 2), ...varintBytes(innerLen)];
  const out = new Uint8Array(frameHead.length + innerLen);
  let o = 0;
  out.set(frameHead, o);
  o += frameHead.length;
  out.set(head, o);
  o += head.length;
  out.set(argHead, o);
  o += argHead.length;
  if (argBytes) out.set(argBytes, o);
  return out;
}

class Reader {
  constructor(buf, start = 0, end = buf.length) {
    this.buf = buf;
    this.pos = start;
    this.end = end;
  }
  done() {
    return this.pos >= this.end;
  }
  // Returns a Number when the value fits in 2^53, else a BigInt (unsigned).
  varint() {
    let result = 0;
    let mul = 1;
    const start = this.pos;
    for (let i = 0; i < 7; i++) {
      if (this.pos >= this.end) throw new Error("truncated varint");
      const byte = this.buf[this.pos++];
      result += (byte & 0x7f) * mul;
      if ((byte & 0x80) === 0) return result;
      mul *= 128;
    }
    // Longer than 49 bits: redo with BigInt.
    this.pos = start;
    let big = 0n;
    let shift = 0n;
    for (;;) {
      if (this.pos >= this.end) throw new Error("truncated varint");
      const byte = this.buf[this.pos++];
      big |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) break;
      shift += 7n;
    }
    return BigInt.asUintN(64, big);
  }
  key() {
    const k = this.varint();
    return [Math.floor(Number(k) / 8), Number(k) & 7];
  }
  bytes() {
    const len = Number(this.varint());
    if (this.pos + len > this.end) throw new Error("truncated field");
    const b = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len;
    return b;
  }
  skip(wireType) {
    if (wireType === 0) this.varint();
    else if (wireType === 1) this.pos += 8;
    else if (wireType === 2) this.bytes();
    else if (wireType === 5) this.pos += 4;
    else throw new Error(`unsupported wire type ${wireType}`);
  }
}

const utf8 = new TextDecoder();

// int64 varint (two's complement in 64 bits) -> JSON-safe value.
function int64Json(v) {
  if (typeof v === "number") return v;
  const s = BigInt.asIntN(64, v);
  if (s >= -9007199254740991n && s <= 9007199254740991n) return Number(s);
  return s.toString();
}

function doubleJson(d) {
  return Number.isFinite(d) ? d : String(d);
}

// QueryResult.CellsBatch.CellType
const CELL_NULL = 1;
const CELL_VARINT = 2;
const CELL_FLOAT64 = 3;
const CELL_STRING = 4;
const CELL_BLOB = 5;

// Appends the cells of one CellsBatch to `acc.cells`; returns is_last_batch.
function decodeBatch(buf, acc) {
  const r = new Reader(buf);
  const types = [];
  const varints = [];
  const doubles = [];
  const blobs = [];
  let strings = [];
  let last = false;
  const packedOrOne = (wt, fn) => {
    if (wt === 2) {
      const b = r.bytes();
      const sub = new Reader(b);
      while (!sub.done()) fn(sub);
    } else {
      fn(r);
    }
  };
  while (!r.done()) {
    const [field, wt] = r.key();
    if (field === 1) packedOrOne(wt, (x) => types.push(Number(x.varint())));
    else if (field === 2) packedOrOne(wt, (x) => varints.push(int64Json(x.varint())));
    else if (field === 3) {
      const readDouble = (x) => {
        const dv = new DataView(x.buf.buffer, x.buf.byteOffset + x.pos, 8);
        doubles.push(doubleJson(dv.getFloat64(0, true)));
        x.pos += 8;
      };
      if (wt === 2) {
        const b = r.bytes();
        const sub = new Reader(b);
        while (!sub.done()) readDouble(sub);
      } else readDouble(r);
    } else if (field === 4 && wt === 2) blobs.push(Buffer.from(r.bytes()).toString("base64"));
    else if (field === 5 && wt === 2) {
      strings = utf8.decode(r.bytes()).split("\0");
      strings.pop(); // every cell is NUL-terminated: drop the empty tail
    } else if (field === 6 && wt === 0) last = Number(r.varint()) !== 0;
    else r.skip(wt);
  }
  let vi = 0;
  let di = 0;
  let si = 0;
  let bi = 0;
  for (const t of types) {
    if (t === CELL_NULL) acc.cells.push(null);
    else if (t === CELL_VARINT) acc.cells.push(varints[vi++]);
    else if (t === CELL_FLOAT64) acc.cells.push(doubles[di++]);
    else if (t === CELL_STRING) acc.cells.push(strings[si++]);
    else if (t === CELL_BLOB) acc.cells.push({ blob: blobs[bi++] });
    else throw new Error(`invalid cell type ${t}`);
  }
  return last;
}

// QueryResult { column_names = 1; error = 2; batch = 3 }
function decodeQueryResult(buf, acc) {
  const r = new Reader(buf);
  let last = false;
  while (!r.done()) {
    const [field, wt] = r.key();
    if (field === 1 && wt === 2) acc.columns.push(utf8.decode(r.bytes()));
    else if (field === 2 && wt === 2) {
      const e = utf8.decode(r.bytes());
      if (e) acc.error = e;
    } else if (field === 3 && wt === 2) last = decodeBatch(r.bytes(), acc) || last;
    else r.skip(wt);
  }
  return last;
}

// AppendTraceDataResult { total_bytes_parsed = 1; error = 2 }
function decodeAppendResult(buf) {
  const r = new Reader(buf);
  let error = null;
  while (!r.done()) {
    const [field, wt] = r.key();
    if (field === 2 && wt === 2) error = utf8.decode(r.bytes()) || null;
    else r.skip(wt);
  }
  return error;
}

// TraceProcessorRpc -> {response, fatal, args: {field: bytes}}
function decodeRpc(buf) {
  const r = new Reader(buf);
  const msg = { response: null, invalid: null, fatal: null, args: {} };
  while (!r.done()) {
    const [field, wt] = r.key();
    if (field === 3 && wt === 0) msg.response = Number(r.varint());
    else if (field === 4 && wt === 0) msg.invalid = Number(r.varint());
    else if (field === 5 && wt === 2) msg.fatal = utf8.decode(r.bytes());
    else if (wt === 2 && field >= 200) msg.args[field] = r.bytes();
    else r.skip(wt);
  }
  return msg;
}

// ---------------------------------------------------------------- engine ----

function loadEngine() {
  const wasmPath = path.join(TP_DIR, "trace_processor.wasm");
  const bundlePath = path.join(TP_DIR, "engine_bundle.js");
  if (!fs.existsSync(wasmPath) || !fs.existsSync(bundlePath)) {
    die(`trace processor not found in ${path.relative(process.cwd(), TP_DIR) || TP_DIR}; run scripts/setup-test-deps.sh`);
  }
  const verbose = !!process.env.TP_VERBOSE;
  const logTail = [];
  const log = (...a) => {
    const line = a.join(" ");
    logTail.push(line);
    if (logTail.length > 50) logTail.shift();
    if (verbose) process.stderr.write(`[tp] ${line}\n`);
  };

  class FakeXMLHttpRequest {
    open(method, url) {
      this.url = String(url);
    }
    send() {
      const name = path.basename(new URL(this.url, "file:///").pathname);
      const file = path.join(TP_DIR, name);
      if (name !== "trace_processor.wasm" || !fs.existsSync(file)) {
        this.status = 404;
        throw new Error(`engine asked for ${name}, which is not available`);
      }
      const b = fs.readFileSync(file);
      this.response = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
      this.status = 200;
    }
  }

  const sandbox = {
    console: { log, warn: log, error: log, info: log, debug: log },
    location: { href: "file:///trace_processor/engine_bundle.js" },
    XMLHttpRequest: FakeXMLHttpRequest,
    WorkerGlobalScope: function WorkerGlobalScope() {},
    setTimeout,
    clearTimeout,
    setInterval,
    clearInterval,
    TextDecoder,
    TextEncoder,
    URL,
    performance,
  };
  sandbox.self = sandbox;
  sandbox.globalThis = sandbox;
  const ctx = vm.createContext(sandbox);
  vm.runInContext(fs.readFileSync(bundlePath, "utf8"), ctx, { filename: "engine_bundle.js" });
  if (typeof sandbox.onmessage !== "function") die("engine_bundle.js did not install a worker onmessage handler");

  const CtxUint8Array = vm.runInContext("Uint8Array", ctx);
  let pending = [];
  const port = {
    onmessage: null,
    postMessage(data) {
      pending.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    },
  };
  sandbox.onmessage({ data: port });

  let seq = 0;
  let rx = Buffer.alloc(0);
  // Sends one request frame; returns the decoded TraceProcessorRpc replies.
  function call(method, argField, argBytes) {
    const frame = rpcFrame(seq++, method, argField, argBytes);
    const data = new CtxUint8Array(frame.length);
    data.set(frame);
    port.onmessage({ data });
    rx = Buffer.concat([rx, ...pending]);
    pending = [];
    const out = [];
    const r = new Reader(rx);
    for (;;) {
      const start = r.pos;
      if (r.done()) break;
      let body;
      try {
        const [field, wt] = r.key();
        if (field !== 1 || wt !== 2) throw new Error(`bad RPC stream frame (field ${field})`);
        body = r.bytes();
      } catch (e) {
        if (String(e.message).startsWith("truncated")) {
          r.pos = start;
          break;
        }
        throw e;
      }
      out.push(decodeRpc(body));
    }
    rx = rx.subarray(r.pos);
    for (const m of out) {
      if (m.fatal) die(`trace processor fatal error: ${m.fatal}`);
      if (m.invalid !== null) die(`trace processor rejected request method ${m.invalid}`);
    }
    return out;
  }
  return { call, logTail };
}

function waitTick() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

async function main() {
  const argv = process.argv.slice(2);
  const stats = argv.includes("--stats");
  const rest = argv.filter((a) => a !== "--stats");
  if (rest.length < 1 || (!stats && rest.length < 2)) {
    die("usage: node tests/tp/query.mjs [--stats] TRACE_FILE [SQL ...]");
  }
  const [traceFile, ...sqls] = rest;
  let fd;
  try {
    fd = fs.openSync(traceFile, "r");
  } catch (e) {
    die(`cannot open trace ${traceFile}: ${e.message}`);
  }

  const engine = loadEngine();
  // The wasm runtime finishes initialising in a promise continuation.
  await waitTick();

  const buf = Buffer.alloc(CHUNK);
  for (;;) {
    const n = fs.readSync(fd, buf, 0, CHUNK, null);
    if (n === 0) break;
    const replies = engine.call(TPM_APPEND_TRACE_DATA, 101, buf.subarray(0, n));
    for (const m of replies) {
      const err = m.args[201] ? decodeAppendResult(m.args[201]) : null;
      if (err) die(`trace processor could not parse ${traceFile}: ${err}`);
    }
  }
  fs.closeSync(fd);
  engine.call(TPM_FINALIZE_TRACE_DATA);

  const lines = [];
  const runQuery = (sql) => {
    const acc = { columns: [], cells: [], error: null };
    // QueryArgs { sql_query = 1 }
    const replies = engine.call(TPM_QUERY_STREAMING, 103, lengthDelimited(1, Buffer.from(sql, "utf8")));
    let last = false;
    for (const m of replies) {
      if (m.response === TPM_QUERY_STREAMING && m.args[203]) {
        last = decodeQueryResult(m.args[203], acc) || last;
      }
    }
    if (!last && acc.error === null) acc.error = "query result ended without its last batch";
    const rows = [];
    const width = acc.columns.length;
    if (width > 0) {
      for (let i = 0; i + width <= acc.cells.length; i += width) rows.push(acc.cells.slice(i, i + width));
    }
    lines.push(JSON.stringify({ columns: acc.columns, rows, error: acc.error }));
  };
  if (stats) runQuery(STATS_SQL);
  for (const sql of sqls) runQuery(sql);
  process.stdout.write(lines.join("\n") + "\n", () => process.exit(0));
}

main().catch((e) => die(e && e.stack ? e.stack.split("\n")[0] : String(e)));
