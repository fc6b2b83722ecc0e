// The official E2B JavaScript SDKs (e2b, @e2b/code-interpreter; pinned in
// package.json) against forge's E2B face. Run by scripts/test-e2b.sh, which
// starts forge and sets E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (a forge
// token of tenant A) and FORGE_TEST_E2B_KEY_B (a token of tenant B): the SDK
// reads nothing else.
import assert from 'node:assert/strict'
import { after, test } from 'node:test'
import {
  AuthenticationError,
  CommandExitError,
  NotFoundError,
  Sandbox,
  SandboxError,
} from '@e2b/code-interpreter'

for (const name of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'FORGE_TEST_E2B_KEY_B']) {
  if (!process.env[name]) throw new Error(`${name} is not set: run this through scripts/test-e2b.sh`)
}
const keyB = process.env.FORGE_TEST_E2B_KEY_B
const timeoutMs = 120_000 // every sandbox ends by itself if a test dies before killing it

const made = []
async function create(opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs, ...opts })
  made.push(sbx)
  return sbx
}
after(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})))
})

test('Sandbox.create and a stateful runCode', async () => {
  const sbx = await create()
  assert.match(sbx.sandboxId, /^\S+$/)
  assert.equal((await sbx.runCode('x = 40')).error, undefined)
  const execution = await sbx.runCode('x + 2')
  assert.equal(execution.text, '42')
  assert.equal((await sbx.runCode("'forge'")).text, 'forge')
})

test('runCode output, callbacks and errors', async () => {
  const sbx = await create()
  const stdout = []
  const stderr = []
  const results = []
  const execution = await sbx.runCode("import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7", {
    onStdout: (m) => stdout.push(m.line),
    onStderr: (m) => stderr.push(m.line),
    onResult: (r) => results.push(r),
  })
  assert.deepEqual(execution.logs.stdout, ['out\n'])
  assert.deepEqual(execution.logs.stderr, ['err\n'])
  assert.deepEqual(stdout, ['out\n'])
  assert.deepEqual(stderr, ['err\n'])
  assert.deepEqual(results.map((r) => r.text), ['42'])

  const failed = await sbx.runCode('1 / 0')
  assert.equal(failed.error.name, 'ZeroDivisionError')
  assert.match(failed.error.value, /division by zero/)
  assert.match(failed.error.traceback, /ZeroDivisionError/)
})

test('a matplotlib PNG on the default template', async () => {
  const sbx = await create()
  const execution = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
  assert.equal(execution.error, undefined)
  assert.ok(execution.results.length >= 1)
  assert.ok(execution.results[0].formats().includes('png'))
  const png = Buffer.from(execution.results[0].png, 'base64')
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
})

test('files: write, read, list', async () => {
  const sbx = await create()
  const info = await sbx.files.write('/home/user/js.txt', 'from js')
  assert.equal(info.path, '/home/user/js.txt')
  assert.equal(await sbx.files.read('/home/user/js.txt'), 'from js')
  const bytes = await sbx.files.read('/home/user/js.txt', { format: 'bytes' })
  assert.equal(Buffer.from(bytes).toString(), 'from js')
  const names = (await sbx.files.list('/home/user')).map((e) => e.name)
  assert.ok(names.includes('js.txt'), `listing ${names}`)
  assert.equal((await sbx.runCode("open('/home/user/js.txt').read()")).text, 'from js')
  await assert.rejects(sbx.files.write('/etc/js.txt', 'x'), (err) => {
    assert.ok(err instanceof SandboxError, `${err}`)
    assert.match(err.message, /\/home\/user/)
    return true
  })
})

test('commands: run, exit codes, streaming', async () => {
  const sbx = await create()
  const chunks = []
  const result = await sbx.commands.run('echo one; echo two >&2; pwd', { onStdout: (d) => chunks.push(d) })
  assert.equal(result.exitCode, 0)
  assert.equal(result.stdout, 'one\n/home/user\n')
  assert.equal(result.stderr, 'two\n')
  assert.equal(chunks.join(''), 'one\n/home/user\n')
  await assert.rejects(sbx.commands.run('echo partial; exit 4'), (err) => {
    assert.ok(err instanceof CommandExitError, `${err}`)
    assert.equal(err.exitCode, 4)
    assert.equal(err.stdout, 'partial\n')
    return true
  })
})

test('commands: stdin, beside runCode; code contexts', async () => {
  const sbx = await create()
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  // The command waits on its stdin while code runs beside it.
  assert.equal((await sbx.runCode('6 * 7')).text, '42')
  await sbx.commands.sendStdin(cat.pid, 'from js\n')
  await sbx.commands.closeStdin(cat.pid)
  const result = await cat.wait()
  assert.equal(result.exitCode, 0)
  assert.equal(result.stdout, 'from js\n')

  const ctx = await sbx.createCodeContext()
  await sbx.runCode('y = "ctx"', { context: ctx })
  assert.equal((await sbx.runCode('y', { context: ctx })).text, 'ctx')
  assert.equal((await sbx.runCode('y')).error.name, 'NameError')
  await sbx.removeCodeContext(ctx.id)
})

test('two sandboxes, list, kill and another tenant', async () => {
  const [a, b] = await Promise.all([create(), create()])
  await Promise.all([a.runCode("v = 'a'"), b.runCode("v = 'b'")])
  assert.deepEqual((await Promise.all([a.runCode('v'), b.runCode('v')])).map((e) => e.text), ['a', 'b'])

  const listed = await Sandbox.list().nextItems()
  const ids = listed.map((s) => s.sandboxId)
  assert.ok(ids.includes(a.sandboxId) && ids.includes(b.sandboxId))

  // Tenant B sees none of it.
  await assert.rejects(Sandbox.connect(a.sandboxId, { apiKey: keyB }), NotFoundError)
  const listedB = await Sandbox.list({ apiKey: keyB }).nextItems()
  assert.ok(!listedB.some((s) => s.sandboxId === a.sandboxId))
  assert.equal(await Sandbox.kill(a.sandboxId, { apiKey: keyB }), false)
  assert.equal(await a.isRunning(), true)

  await a.kill()
  assert.equal(await a.isRunning(), false)
  assert.equal(await Sandbox.kill(a.sandboxId), false)
  await assert.rejects(Sandbox.connect(a.sandboxId), NotFoundError)
  assert.equal((await b.runCode('v')).text, 'b')
})

test('bad input: wrong key, unknown template, internet access', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'forge_not_a_token', timeoutMs }), AuthenticationError)
  await assert.rejects(Sandbox.create('forge-no-such-template', { timeoutMs }), (err) => {
    assert.ok(err instanceof SandboxError, `${err}`)
    assert.match(err.message, /forge-no-such-template/)
    return true
  })
  await assert.rejects(Sandbox.create({ allowInternetAccess: true, timeoutMs }), (err) => {
    assert.ok(err instanceof SandboxError, `${err}`)
    assert.match(err.message, /egress/)
    return true
  })
})
