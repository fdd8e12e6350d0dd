// The edge's denial (fencecheck.DenialJSON), byte for byte.

/** Header names, as the edge sends them (Go's package fencewire; test/vectors.test.js holds them equal). */
export const HEADER_VERIFIED = 'x-fence-verified';
export const HEADER_KEY = 'x-fence-key';
export const HEADER_PROOF = 'x-fence-proof';
export const HEADER_REASON = 'x-fence-reason';
export const HEADER_DECISION_ID = 'x-fence-decision-id';
/** What a holder sends: the fence it presents, its lockId (optional). */
export const HEADER_TOKEN = 'x-fence-token';
export const HEADER_LOCK_ID = 'x-fence-lock-id';

/** Why a write was refused; the values and statuses are the edge's. */
export type Reason = 'missing' | 'malformed' | 'stale' | 'bad-proof' | 'unavailable';

/** The HTTP status a refusal is answered with. */
export function reasonStatus(r: Reason): number {
  switch (r) {
    case 'missing':
      return 428;
    case 'malformed':
      return 400;
    case 'stale':
      return 409;
    case 'bad-proof':
      return 403;
    default:
      return 503;
  }
}

const hex = '0123456789abcdef';

/**
 * goJSONString is Go's encoding/json for a string: HTML-safe (<, >, &
 * escaped), U+2028/U+2029 escaped, \b \f \n \r \t, other controls \u00XX,
 * and ill-formed text (a lone surrogate) as U+FFFD, as Go writes invalid
 * UTF-8.
 */
export function goJSONString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (c >= 0xd800 && c <= 0xdfff) {
      out += '\\ufffd';
      continue;
    }
    switch (ch) {
      case '"':
        out += '\\"';
        continue;
      case '\\':
        out += '\\\\';
        continue;
      case '\b':
        out += '\\b';
        continue;
      case '\f':
        out += '\\f';
        continue;
      case '\n':
        out += '\\n';
        continue;
      case '\r':
        out += '\\r';
        continue;
      case '\t':
        out += '\\t';
        continue;
    }
    if (c < 0x20 || ch === '<' || ch === '>' || ch === '&') {
      out += '\\u00' + hex[c >> 4] + hex[c & 15];
    } else if (c === 0x2028 || c === 0x2029) {
      out += '\\u' + c.toString(16);
    } else {
      out += ch;
    }
  }
  return out + '"';
}

/** The denial body: {"error","key","presented","current","decisionId"}. */
export function denialBody(reason: Reason, key: string, presented: string, current: string, decisionId: string): string {
  return (
    '{"error":' + goJSONString(reason) +
    ',"key":' + goJSONString(key) +
    ',"presented":' + goJSONString(presented) +
    ',"current":' + goJSONString(current) +
    ',"decisionId":' + goJSONString(decisionId) + '}'
  );
}

/** A denial as the edge answers it: status, headers, body. */
export interface Denial {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** denial builds the edge's answer for reason. */
export function denial(reason: Reason, key: string, presented: string, current: string, decisionId: string): Denial {
  return {
    status: reasonStatus(reason),
    headers: {
      'content-type': 'application/json',
      'cache-control': 'no-store',
      [HEADER_REASON]: reason,
      [HEADER_DECISION_ID]: decisionId,
    },
    body: denialBody(reason, key, presented, current, decisionId),
  };
}

const MAX_DECISION_ID = 64;

/**
 * edgeDecisionId returns the edge's decision id when the request carries
 * exactly one plausible id (1 to 64 base64url characters), else "": a
 * denial links the edge's audit trail but never echoes arbitrary input.
 */
export function edgeDecisionId(values: readonly string[] | undefined): string {
  if (!values || values.length !== 1) return '';
  const v = values[0]!;
  return v.length > 0 && v.length <= MAX_DECISION_ID && /^[A-Za-z0-9_-]+$/.test(v) ? v : '';
}
