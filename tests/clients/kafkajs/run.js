#!/usr/bin/env node
// KafkaJS driver for tests/clients/test_kafkajs.py (and the KafkaJS differential test in
// tests/reference): `node run.js <subcommand>` with a JSON spec on stdin, one JSON result on
// stdout. The Python side does all the asserting; this file only translates a spec into KafkaJS
// calls and reports what KafkaJS saw (records, metadata, error types), so a failure shows up
// as data rather than as a crash. Every subcommand bounds its own waiting (spec.timeoutMs) and
// exits; an uncaught failure prints {"error": ...} and exits 1.
'use strict'

const fs = require('fs')
const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')

// snappy is the one extra codec that is pure JS (snappyjs); lz4 and zstd need native add-ons.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec

const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
}

function kafka (spec) {
  const cfg = {
    clientId: spec.clientId || 'snakka-kafkajs-test',
    brokers: spec.brokers,
    logLevel: logLevel[(spec.logLevel || 'NOTHING').toUpperCase()],
    connectionTimeout: 10000,
    requestTimeout: 30000,
    // Errors the tests provoke must come back as data, not after minutes of retrying.
    retry: { retries: spec.retries === undefined ? 5 : spec.retries, initialRetryTime: 100, maxRetryTime: 1000 },
  }
  if (spec.sasl) cfg.sasl = spec.sasl
  if (spec.ssl) {
    cfg.ssl = { rejectUnauthorized: true }
    if (spec.ssl.ca) cfg.ssl.ca = [fs.readFileSync(spec.ssl.ca, 'utf8')]
    if (spec.ssl.cert) cfg.ssl.cert = fs.readFileSync(spec.ssl.cert, 'utf8')
    if (spec.ssl.key) cfg.ssl.key = fs.readFileSync(spec.ssl.key, 'utf8')
  }
  return new Kafka(cfg)
}

function errorInfo (e) {
  return { name: e.name, type: e.type || null, code: e.code === undefined ? null : e.code, message: e.message,
    cause: e.cause ? errorInfo(e.cause) : null }
}

// spec message -> KafkaJS message (strings stay strings; null stays null: a tombstone)
function toMessage (m) {
  const out = { value: m.value === undefined ? null : m.value }
  if (m.key !== undefined) out.key = m.key
  if (m.partition !== undefined) out.partition = m.partition
  if (m.headers) out.headers = m.headers
  if (m.timestamp !== undefined) out.timestamp = String(m.timestamp)
  return out
}

function fromMessage (topic, partition, message) {
  const headers = {}
  for (const [k, v] of Object.entries(message.headers || {})) {
    headers[k] = Array.isArray(v) ? v.map(String) : (v === undefined ? null : v.toString())
  }
  return {
    topic,
    partition,
    offset: Number(message.offset),
    key: message.key === null ? null : message.key.toString(),
    value: message.value === null ? null : message.value.toString(),
    headers,
    timestamp: Number(message.timestamp),
  }
}

function deadline (ms, what) {
  let timer
  const p = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
  })
  return { promise: p, clear: () => clearTimeout(timer) }
}

async function until (pred, ms, what) {
  const d = deadline(ms, what)
  try {
    await Promise.race([d.promise, (async () => {
      while (!pred()) await new Promise(resolve => setTimeout(resolve, 20))
    })()])
  } finally { d.clear() }
}

// -- produce: send (one call per entry of spec.sends) or sendBatch ---------------------------
async function produce (spec) {
  const client = kafka(spec)
  const producer = client.producer({
    idempotent: !!spec.idempotent,
    maxInFlightRequests: spec.idempotent ? 1 : undefined,
    allowAutoTopicCreation: spec.allowAutoTopicCreation !== false,
  })
  await producer.connect()
  const results = []
  try {
    const common = {
      acks: spec.acks === undefined ? -1 : spec.acks,
      compression: COMPRESSION[spec.compression || 'none'],
    }
    if (spec.batch) {
      const topicMessages = spec.batch.map(t => ({ topic: t.topic, messages: t.messages.map(toMessage) }))
      try {
        results.push({ ok: await producer.sendBatch({ topicMessages, ...common }) })
      } catch (e) { results.push({ error: errorInfo(e) }) }
    }
    if (spec.generate) {
      // many records without a big spec: value `v<i>` padded to valueSize, key `k<i>`,
      // spec.generate.chunk records per sendBatch call over every partition round robin
      const g = spec.generate
      for (let from = 0; from < g.count; from += g.chunk) {
        const messages = []
        for (let i = from; i < Math.min(from + g.chunk, g.count); i++) {
          messages.push({ key: `k${i}`, value: `v${i}-`.padEnd(g.valueSize || 0, 'x'), partition: i % g.partitions })
        }
        try {
          await producer.sendBatch({ topicMessages: [{ topic: g.topic, messages }], ...common })
        } catch (e) { results.push({ error: errorInfo(e) }); break }
      }
      results.push({ ok: 'generated' })
    }
    for (const s of spec.sends || []) {
      try {
        results.push({ ok: await producer.send({ topic: s.topic, messages: s.messages.map(toMessage), ...common }) })
      } catch (e) { results.push({ error: errorInfo(e) }) }
    }
  } finally {
    await producer.disconnect()
  }
  return { results }
}

// -- consume: one group member until spec.count records, then disconnect (which commits) --------
async function consume (spec) {
  const client = kafka(spec)
  const consumer = client.consumer({
    groupId: spec.groupId,
    readUncommitted: !!spec.readUncommitted,
    allowAutoTopicCreation: false,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 200,
    rebalanceTimeout: 10000,
    ...(spec.maxBytesPerPartition ? { maxBytesPerPartition: spec.maxBytesPerPartition } : {}),
    ...(spec.maxBytes ? { maxBytes: spec.maxBytes } : {}),
  })
  const records = []
  // brief: [partition, offset, value] per record, for runs of many records
  const keep = spec.brief
    ? (topic, partition, message) => [partition, Number(message.offset), message.value.toString()]
    : fromMessage
  const joins = []
  const crashes = []
  consumer.on(consumer.events.GROUP_JOIN, e => joins.push({ memberId: e.payload.memberId, leaderId: e.payload.leaderId, assignment: e.payload.memberAssignment }))
  consumer.on(consumer.events.CRASH, e => crashes.push(errorInfo(e.payload.error)))
  await consumer.connect()
  try {
    // spec.topicPattern: a regular expression, matched by KafkaJS against the cluster's topics
    const topics = spec.topicPattern ? [new RegExp(spec.topicPattern)] : spec.topics
    await consumer.subscribe({ topics, fromBeginning: spec.fromBeginning !== false })
    const manual = spec.commit === 'manual'
    const each = spec.mode === 'batch'
      ? {
          // eachBatch: the whole fetched batch at once, offsets resolved as a unit
          eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
            for (const message of batch.messages) {
              records.push(keep(batch.topic, batch.partition, message))
              resolveOffset(message.offset)
            }
            await heartbeat()
          },
        }
      : {
          eachMessage: async ({ topic, partition, message }) => {
            records.push(keep(topic, partition, message))
            if (manual) {
              await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
            }
          },
        }
    await consumer.run({
      autoCommit: !manual,
      autoCommitInterval: spec.autoCommitInterval || null,
      partitionsConsumedConcurrently: spec.concurrency || 1,
      ...each,
    })
    if (spec.seek) for (const s of spec.seek) consumer.seek({ topic: s.topic, partition: s.partition, offset: String(s.offset) })
    await until(() => records.length >= spec.count || crashes.length > 0, spec.timeoutMs || 30000,
      `${spec.count} records`)
  } catch (e) {
    return { records, joins, crashes, error: errorInfo(e) }
  } finally {
    await consumer.disconnect()
  }
  return { records, joins, crashes }
}

// -- group: two members of one group in this process, through a join, a rebalance and a leave.
// Phase 1: A alone consumes spec.first records; phase 2: B joins, the test's second batch is
// produced (by this script, after both members have their partitions) and consumed by both;
// phase 3: B disconnects, A gets every partition back and consumes the third batch.
// Commits are manual and synchronous per record, so "committed" means "seen".
async function group (spec) {
  const client = kafka(spec)
  const members = {}
  const mk = (name) => {
    const consumer = client.consumer({
      groupId: spec.groupId, sessionTimeout: 10000, heartbeatInterval: 300, maxWaitTimeInMs: 200, rebalanceTimeout: 10000,
    })
    const m = { consumer, records: [], joins: [], crashes: [] }
    consumer.on(consumer.events.GROUP_JOIN, e => m.joins.push({ memberId: e.payload.memberId, assignment: e.payload.memberAssignment }))
    consumer.on(consumer.events.CRASH, e => m.crashes.push(errorInfo(e.payload.error)))
    members[name] = m
    return m
  }
  const start = async (m) => {
    await m.consumer.connect()
    await m.consumer.subscribe({ topic: spec.topic, fromBeginning: true })
    await m.consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        m.records.push(fromMessage(topic, partition, message))
        await m.consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
      },
    })
  }
  const total = () => Object.values(members).reduce((n, m) => n + m.records.length, 0)
  const producer = client.producer()
  await producer.connect()
  const send = async (from, to) => {
    const messages = []
    for (let i = from; i < to; i++) messages.push({ key: `k${i}`, value: `v${i}` })
    await producer.send({ topic: spec.topic, messages })
  }
  const ms = spec.timeoutMs || 30000
  const assigned = (m) => { const j = m.joins[m.joins.length - 1]; return j ? (j.assignment[spec.topic] || []) : [] }
  const phases = []
  try {
    const a = mk('a')
    await send(0, spec.batch)
    await start(a)
    await until(() => total() >= spec.batch, ms, 'phase 1 records')
    phases.push({ a: assigned(a) })
    const b = mk('b')
    const aJoins = a.joins.length
    await start(b)
    // both members rejoined: A once more, B once, and the two assignments split the partitions
    await until(() => a.joins.length > aJoins && b.joins.length > 0 &&
      assigned(a).length + assigned(b).length === spec.partitions, ms, 'rebalance to two members')
    phases.push({ a: assigned(a), b: assigned(b) })
    await send(spec.batch, 2 * spec.batch)
    await until(() => total() >= 2 * spec.batch, ms, 'phase 2 records')
    const aJoins2 = a.joins.length
    await b.consumer.disconnect()
    await until(() => a.joins.length > aJoins2 && assigned(a).length === spec.partitions, ms, 'rebalance after leave')
    phases.push({ a: assigned(a) })
    await send(2 * spec.batch, 3 * spec.batch)
    await until(() => total() >= 3 * spec.batch, ms, 'phase 3 records')
  } catch (e) {
    phases.push({ error: errorInfo(e) })
  } finally {
    await producer.disconnect()
    for (const m of Object.values(members)) await m.consumer.disconnect()
  }
  const out = { phases }
  for (const [name, m] of Object.entries(members)) out[name] = { records: m.records, joins: m.joins, crashes: m.crashes }
  return out
}

// -- transactions: spec.txns = [{messages, offsets?: {groupId, topics}, end: commit|abort}] ------
async function transact (spec) {
  const client = kafka(spec)
  const producer = client.producer({ transactionalId: spec.transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const results = []
  try {
    for (const t of spec.txns) {
      const txn = await producer.transaction()
      try {
        await txn.send({ topic: t.topic, messages: t.messages.map(toMessage) })
        if (t.offsets) await txn.sendOffsets({ consumerGroupId: t.offsets.groupId, topics: t.offsets.topics })
        if (t.end === 'abort') await txn.abort(); else await txn.commit()
        results.push({ ok: t.end })
      } catch (e) {
        results.push({ error: errorInfo(e) })
        try { await txn.abort() } catch (_) {}
      }
    }
  } finally {
    await producer.disconnect()
  }
  return { results }
}

// -- fence: producer A opens a transaction, producer B starts with the same transactionalId
// (InitProducerId bumps the epoch), then A tries to send and to commit: both must fail; B's
// own transaction commits.
async function fence (spec) {
  const client = kafka(spec)
  const mk = () => client.producer({ transactionalId: spec.transactionalId, idempotent: true, maxInFlightRequests: 1 })
  const a = mk()
  const b = mk()
  const out = {}
  await a.connect()
  try {
    const ta = await a.transaction()
    await ta.send({ topic: spec.topic, messages: [{ value: 'a-before' }] })
    await b.connect()
    // KafkaJS sends InitProducerId at the first transaction(), not at connect()
    const tb = await b.transaction()
    const step = async (name, fn) => { try { await fn(); out[name] = 'ok' } catch (e) { out[name] = errorInfo(e) } }
    await step('aSend', () => ta.send({ topic: spec.topic, messages: [{ value: 'a-after' }] }))
    await step('aCommit', () => ta.commit())
    await tb.send({ topic: spec.topic, messages: [{ value: 'b' }] })
    await step('bCommit', () => tb.commit())
  } finally {
    await a.disconnect()
    await b.disconnect()
  }
  return out
}

// -- lso: a read_committed consumer while a transaction is open sees the records before it
// (spec.before, plain sends) and not the open transaction's; after the commit it sees them.
async function lso (spec) {
  const client = kafka(spec)
  const producer = client.producer({ transactionalId: spec.transactionalId, idempotent: true, maxInFlightRequests: 1 })
  const plain = client.producer()
  const consumer = client.consumer({ groupId: spec.groupId, maxWaitTimeInMs: 100, sessionTimeout: 10000, heartbeatInterval: 500 })
  const records = []
  let fetchesWhileOpen = 0
  let open = false
  consumer.on(consumer.events.FETCH, () => { if (open) fetchesWhileOpen++ })
  await Promise.all([producer.connect(), plain.connect(), consumer.connect()])
  const out = {}
  try {
    const txn = await producer.transaction()
    await txn.send({ topic: spec.topic, messages: [{ value: 'txn-0' }, { value: 'txn-1' }] })
    open = true
    await plain.send({ topic: spec.topic, messages: [{ value: 'after-open' }] })
    await consumer.subscribe({ topics: [spec.topic], fromBeginning: true })
    await consumer.run({ eachMessage: async ({ message }) => { records.push(message.value.toString()) } })
    // several complete fetch rounds with the transaction open: nothing may show up
    await until(() => fetchesWhileOpen >= 5, spec.timeoutMs || 30000, 'fetches while open')
    out.whileOpen = records.slice()
    open = false
    await txn.commit()
    await until(() => records.length >= 3, spec.timeoutMs || 30000, 'records after commit')
    out.afterCommit = records.slice()
  } catch (e) {
    out.error = errorInfo(e)
  } finally {
    await consumer.disconnect()
    await producer.disconnect()
    await plain.disconnect()
  }
  return out
}

// -- admin: spec.ops = [[method, args...]], each answered as {ok: result} or {error} -------------
async function admin (spec) {
  const client = kafka(spec)
  const a = client.admin()
  await a.connect()
  const results = []
  try {
    for (const [op, ...args] of spec.ops) {
      try {
        let r = await a[op](...args)
        if (r === undefined) r = null
        results.push({ ok: JSON.parse(JSON.stringify(r, (k, v) => typeof v === 'bigint' ? v.toString() : v)) })
      } catch (e) {
        results.push({ error: errorInfo(e) })
      }
    }
  } finally {
    await a.disconnect()
  }
  return { results }
}

const COMMANDS = { produce, consume, group, transact, fence, lso, admin }

// process.exit() right after a write to a pipe drops what the pipe has not taken yet (node
// writes pipes asynchronously), so exit from the write's callback.
function emit (obj, code) {
  process.stdout.write(JSON.stringify(obj) + '\n', () => process.exit(code))
}

async function main () {
  const cmd = process.argv[2]
  if (!COMMANDS[cmd]) throw new Error(`usage: run.js ${Object.keys(COMMANDS).join('|')} < spec.json`)
  const spec = JSON.parse(fs.readFileSync(0, 'utf8'))
  return COMMANDS[cmd](spec)
}

main().then(out => emit(out, 0), e => emit({ error: errorInfo(e) }, 1))
