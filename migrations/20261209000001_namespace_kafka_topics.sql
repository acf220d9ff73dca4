-- The Kafka topics a namespace's timers may publish to (docs/semantics.md, "Tenants"):
-- exact names, or prefixes ending in `*`; none unless listed. The service's own topics
-- (punctual.*, Kafka's internal __*) are refused whatever the list says.
ALTER TABLE namespaces ADD COLUMN kafka_topics text[] NOT NULL DEFAULT '{}';

-- Namespaces that publish already keep the topics their timers name, so that nothing
-- running stops at the upgrade; a timer naming one of the service's own topics does not
-- grant it, and fails at its next fire.
INSERT INTO namespaces (namespace, kafka_topics)
SELECT namespace, array_agg(DISTINCT kafka_topic ORDER BY kafka_topic)
  FROM timers
 WHERE action_kind = 'kafka' AND kafka_topic IS NOT NULL AND state <> 'deleted'
   AND kafka_topic NOT LIKE 'punctual.%' AND kafka_topic NOT LIKE '\_\_%'
 GROUP BY namespace
ON CONFLICT (namespace) DO UPDATE SET kafka_topics = EXCLUDED.kafka_topics;
