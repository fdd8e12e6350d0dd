// A bearer token goes over plain http only to this machine: the Go client's
// rule (client/options.go isLoopbackHost; client/token_test.go holds the
// same HTTP cases). A name that merely looks like a loopback address
// ("127.evil.com", "127.0.0.1.nip.io") resolves wherever its owner likes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockClient } from '../dist/lock.js';
import { isLoopbackHost } from '../dist/loopback.js';

// [baseUrl, token?, refused]
const cases = [
  // Names that only look local: remote.
  ['http://127.evil.com', 't', true],
  ['http://127.0.0.1.nip.io:8080', 't', true],
  ['http://127.0.0.1.evil', 't', true],
  ['http://127.0.0.1.example:8080', 't', true],
  ['http://localhost.evil.com', 't', true],
  ['http://localhost.', 't', true],
  // Addresses that are not loopback.
  ['http://10.0.0.7:8080', 't', true],
  ['http://fencegate.example:8080', 't', true],
  ['http://[2001:db8::1]:8080', 't', true],
  ['http://[::ffff:10.0.0.1]', 't', true],
  ['http://0.0.0.0:8080', 't', true],
  ['http://[::]:8080', 't', true],
  // Loopback: localhost and IP literals in 127.0.0.0/8 or ::1.
  ['http://127.0.0.1:8080', 't', false],
  ['http://127.1.2.3', 't', false],
  ['http://127.255.255.255', 't', false],
  ['http://localhost', 't', false],
  ['http://LOCALHOST:8080', 't', false],
  ['http://[::1]:8080', 't', false],
  ['http://[0:0:0:0:0:0:0:1]', 't', false],
  ['http://[::ffff:127.0.0.1]', 't', false], // Go's ip.IsLoopback agrees
  // TLS, or no token: nothing leaks.
  ['https://127.evil.com', 't', false],
  ['https://10.0.0.7:8080', 't', false],
  ['http://127.evil.com', undefined, false],
];

// failures lists the cases refuses(baseUrl, token) gets wrong.
function failures(refuses) {
  return cases
    .filter(([url, token, want]) => refuses(url, token) !== want)
    .map(([url, token, want]) => `${url} (token ${token ? 'set' : 'unset'}): refused=${!want}, want ${want}`);
}

// The real constructor: refused is a throw naming https.
const client = (url, token) => {
  try {
    new LockClient({ baseUrl: url, token });
    return false;
  } catch (e) {
    assert.match(e.message, /https/, `${url}: threw something else: ${e.message}`);
    return true;
  }
};

// The constructor's decision with the loopback rule swapped, to run the
// table against broken rules.
const withRule = (loopback) => (url, token) => {
  const u = new URL(url);
  return Boolean(token) && u.protocol === 'http:' && !loopback(u.hostname);
};

test('a token over plain http goes to loopback hosts only (the Go client\'s rule)', () => {
  assert.deepEqual(failures(client), []);
  assert.deepEqual(failures(withRule(isLoopbackHost)), [], 'the model of the constructor is not faithful');
  // Hostnames as given, without a URL's normalising (brackets optional, as in Go).
  for (const h of ['127.0.0.1', '[127.0.0.1]', '::1', '[::1]', 'localhost', 'Localhost', '127.9.9.9']) assert.ok(isLoopbackHost(h), h);
  for (const h of ['', '127.', '127', '127.0.0.1.', '::2', '127.0.0.256', 'localhost:80', '127.0.0.1:80']) assert.equal(isLoopbackHost(h), false, h);
});

test('the table catches the broken rules: "starts with 127." and "everything is local"', () => {
  const prefix = (h) => h === 'localhost' || h === '[::1]' || /^127\./.test(h); // the rule this replaced
  const caught = failures(withRule(prefix));
  for (const url of ['http://127.evil.com', 'http://127.0.0.1.nip.io:8080', 'http://127.0.0.1.evil']) {
    assert.ok(caught.some((f) => f.startsWith(url + ' ')), `the table does not catch ${url} under the prefix rule`);
  }
  assert.notDeepEqual(failures(withRule(() => true)), [], 'the table passes with a rule that accepts every host');
});
