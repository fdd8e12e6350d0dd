// Test helpers: the shared vectors, raw HTTP requests (exact bytes, header
// lines repeated), and the services scripts/testenv starts (never mocked: a
// missing one fails).
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';

export const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const vectors = JSON.parse(readFileSync(join(repo, 'fenceguard/testdata/vectors.json'), 'utf8'));

export function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the tests under scripts/testenv (make test-js), which starts a throwaway server`);
  return v;
}

export const ns = (p) => `${p}_${randomBytes(4).toString('hex')}`;

/**
 * raw sends one HTTP/1.1 request with exactly these header lines (values
 * as JS strings, sent as UTF-8) and returns status, headers (lower-case,
 * values as UTF-8 text) and body.
 */
export function raw(port, method, path, headerLines = [], body = '') {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    const chunks = [];
    let head = `${method} ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`;
    for (const [k, v] of headerLines) head += `${k}: ${v}\r\n`;
    s.on('connect', () => s.end(Buffer.concat([Buffer.from(head + '\r\n', 'utf8'), Buffer.from(body)])));
    s.on('data', (c) => chunks.push(c));
    s.on('error', reject);
    s.on('close', () => {
      const all = Buffer.concat(chunks);
      const i = all.indexOf('\r\n\r\n');
      const lines = all.subarray(0, i).toString('utf8').split('\r\n');
      const status = Number(lines[0].split(' ')[1]);
      const headers = {};
      for (const l of lines.slice(1)) {
        const j = l.indexOf(':');
        headers[l.slice(0, j).toLowerCase()] = l.slice(j + 1).trim();
      }
      let b = all.subarray(i + 4);
      if (headers['transfer-encoding'] === 'chunked') {
        const parts = [];
        let k = 0;
        for (;;) {
          const e = b.indexOf('\r\n', k);
          const n = parseInt(b.subarray(k, e).toString(), 16);
          if (!n) break;
          parts.push(b.subarray(e + 2, e + 2 + n));
          k = e + 2 + n + 2;
        }
        b = Buffer.concat(parts);
      }
      resolve({ status, headers, body: b.toString('utf8') });
    });
  });
}

export function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}
