package golang

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// The brokers' clients and idemgen's adapters on them; a generated file
// imports a broker's pair only when one of its jobs consumes from it.
const (
	jetstreamPkg = "github.com/nats-io/nats.go/jetstream"
	amqpPkg      = "github.com/rabbitmq/amqp091-go"
	kgoPkg       = "github.com/twmb/franz-go/pkg/kgo"
	idemnatsPkg  = "github.com/idemgen/idemgen/idem/idemnats"
	idemamqpPkg  = "github.com/idemgen/idemgen/idem/idemamqp"
	idemkafkaPkg = "github.com/idemgen/idemgen/idem/idemkafka"
	strconvPkg   = "strconv"
)

func decodeName(j *model.Job) string { return "decode" + j.GoName }

// consumer emits what a job with consume: gets: its messages' decoder,
// the job's `ConsumeFrom` on any idembroker.Source, and `Consume` on its broker's client.
func consumer(f *jen.File, j *model.Job) {
	if j.Consume == nil {
		return
	}
	f.ImportName(idembrokerPkg, "idembroker")
	decodeFunc(f, j)
	consumeFrom(f, j)
	brokerConsume(f, j)
}

// decodeFunc emits the decoder of one message into a unit: the JSON body
// by field name, then the fields the spec reads from headers.
//
//	// decodeSettlePayment decodes one settle_payment message: ...
//	func decodeSettlePayment(m idembroker.Message) (Payment, error) {
//		var u Payment
//		if len(bytes.TrimSpace(m.Body)) > 0 {
//			if err := json.Unmarshal(m.Body, &u); err != nil {
//				return u, fmt.Errorf("settle_payment: message body: %w", err)
//			}
//		}
//		if v, ok := m.Headers["Nats-Msg-Id"]; ok {
//			u.EventID = v
//		}
//		return u, nil
//	}
func decodeFunc(f *jen.File, j *model.Job) {
	f.Commentf("%s decodes one %s message into its unit (%s): the JSON body by", decodeName(j), j.Name, j.Unit.GoName)
	f.Comment("field name (an empty body decodes to no fields), then each field the spec reads from a")
	f.Comment("header, when the message has that header. A body or header that does not decode is an")
	f.Comment("error, and the consumer parks the message with it.")
	f.Func().Id(decodeName(j)).Params(jen.Id("m").Add(brk("Message"))).Params(jen.Id(j.Unit.GoName), jen.Error()).BlockFunc(func(g *jen.Group) {
		g.Var().Id("u").Id(j.Unit.GoName)
		g.If(jen.Len(jen.Qual("bytes", "TrimSpace").Call(jen.Id("m").Dot("Body"))).Op(">").Lit(0)).Block(
			jen.If(jen.Err().Op(":=").Qual(jsonPkg, "Unmarshal").Call(jen.Id("m").Dot("Body"), jen.Op("&").Id("u")), jen.Err().Op("!=").Nil()).Block(
				jen.Return(jen.Id("u"), Errorf().Call(jen.Lit(j.Name+": message body: %w"), jen.Err())),
			),
		)
		for _, h := range j.Consume.Headers {
			g.If(jen.List(jen.Id("v"), jen.Id("ok")).Op(":=").Id("m").Dot("Headers").Index(jen.Lit(h.Header)), jen.Id("ok")).Block(headerValue(j, h)...)
		}
		g.Return(jen.Id("u"), jen.Nil())
	})
}

// headerValue converts a header's text v to its field's type and sets the
// field; a nullable field is null when the header is empty:
//
//	x, err := strconv.ParseInt(v, 10, 64)
//	if err != nil {
//		return u, fmt.Errorf("settle_payment: header %q for field %s: %q is not an int64", "X-Amount", "amount_cents", v)
//	}
//	u.AmountCents = x
func headerValue(j *model.Job, h *model.HeaderField) []jen.Code {
	fld := h.Field
	target := jen.Id("u").Dot(fld.GoName)
	v := jen.Id("v")
	var parse *jen.Statement // x, err := ... ; nil for a string
	value, converted := jen.Id("x"), false
	switch fld.Type {
	case model.String:
		value = v
	case model.Int32:
		converted = true
		parse = jen.Qual(strconvPkg, "ParseInt").Call(v, jen.Lit(10), jen.Lit(32))
		value = jen.Int32().Call(jen.Id("x"))
	case model.Int64:
		parse = jen.Qual(strconvPkg, "ParseInt").Call(v, jen.Lit(10), jen.Lit(64))
	case model.Float64:
		parse = jen.Qual(strconvPkg, "ParseFloat").Call(v, jen.Lit(64))
	case model.Bool:
		parse = jen.Qual(strconvPkg, "ParseBool").Call(v)
	case model.Time:
		parse = jen.Qual("time", "Parse").Call(jen.Qual("time", "RFC3339"), v)
	case model.UUID:
		parse = jen.Qual(uuidPkg, "Parse").Call(v)
	}
	var set []jen.Code
	if parse != nil {
		what := map[model.Type]string{model.Int32: "an int32", model.Int64: "an int64", model.Float64: "a float64",
			model.Bool: "a bool", model.Time: "an RFC 3339 time", model.UUID: "a UUID"}[fld.Type]
		set = append(set,
			jen.List(jen.Id("x"), jen.Err()).Op(":=").Add(parse),
			jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Id("u"), Errorf().Call(
				jen.Lit(fmt.Sprintf("%s: header %q for field %s: %%q is not %s", j.Name, h.Header, fld.Name, what)), v.Clone()))),
		)
	}
	if !fld.Pointer() {
		return append(set, target.Clone().Op("=").Add(value))
	}
	if converted {
		set = append(set, jen.Id("n").Op(":=").Add(value))
		value = jen.Id("n")
	}
	set = append(set, target.Clone().Op("=").Op("&").Add(value))
	return []jen.Code{jen.If(v.Clone().Op("==").Lit("")).Block(target.Clone().Op("=").Nil()).Else().Block(set...)}
}

// consumeFrom emits the broker-agnostic consumer:
//
//	func (j *SettlePayment) ConsumeFrom(ctx context.Context, src idembroker.Source, opts ...idembroker.Option) error {
//		return idembroker.Consume(ctx, j.e, src, decodeSettlePayment, idembroker.Config{Job: "settle_payment", ...}, opts...)
//	}
func consumeFrom(f *jen.File, j *model.Job) {
	c := j.Consume
	cfg := jen.Dict{
		jen.Id("Job"):    jen.Lit(j.Name),
		jen.Id("Broker"): jen.Lit(string(c.Broker)),
		jen.Id("From"):   jen.Lit(c.From),
		jen.Id("Group"):  jen.Lit(c.Group),
	}
	if c.Batch > 0 {
		cfg[jen.Id("Batch")] = jen.Lit(c.Batch)
	}
	f.Commentf("ConsumeFrom runs the %s job as a consumer of src until ctx ends. Each fetched batch", j.Name)
	f.Comment("is one Process call, and each message is settled with the broker only after its unit's")
	f.Comment("transaction committed: acknowledged when the unit is done or its effects are owed (the")
	f.Comment("consumer performs them, and a dead consumer's once their lease ran out), given back for")
	f.Comment("redelivery after a failed write, parked once and settled when it can never succeed.")
	f.Comment("It returns nil when ctx ended and what it fetched was settled. It closes src when it returns.")
	f.Func().Add(recv(j)).Id("ConsumeFrom").Params(jen.Id("ctx").Add(Context()), jen.Id("src").Add(brk("Source")), jen.Id("opts").Op("...").Add(brk("Option"))).Error().Block(
		jen.Return(brk("Consume").Call(jen.Id("ctx"), jen.Id("j").Dot("e"), jen.Id("src"), jen.Id(decodeName(j)), brk("Config").Values(cfg), jen.Id("opts").Op("..."))),
	)
}

// brokerConsume emits Consume on the broker's own client: it opens the
// spec's subscription with the broker's adapter, consumes until ctx ends
// and closes it.
//
//	func (j *SettlePayment) Consume(ctx context.Context, js jetstream.JetStream, opts ...idembroker.Option) error {
//		src, err := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Subject: "payments.settled", Durable: "ledgerfeed"})
//		if err != nil {
//			return fmt.Errorf("job %q: %w", "settle_payment", err)
//		}
//		return errors.Join(j.ConsumeFrom(ctx, src, opts...), src.Close())
//	}
func brokerConsume(f *jen.File, j *model.Job) {
	c := j.Consume
	var client jen.Code
	var source *jen.Statement
	var doc string
	switch c.Broker {
	case model.NATS:
		f.ImportName(jetstreamPkg, "jetstream")
		f.ImportName(idemnatsPkg, "idemnats")
		client = jen.Id("js").Qual(jetstreamPkg, "JetStream")
		cfg := jen.Dict{jen.Id("Subject"): jen.Lit(c.From), jen.Id("Durable"): jen.Lit(c.Group)}
		if c.AckWait > 0 {
			cfg[jen.Id("AckWait")] = durationLit(c.AckWait)
		}
		source = jen.Qual(idemnatsPkg, "NewSource").Call(jen.Id("ctx"), jen.Id("js"), jen.Qual(idemnatsPkg, "SourceConfig").Values(cfg))
		doc = fmt.Sprintf("the JetStream durable\nconsumer %q on subject %q", c.Group, c.From)
	case model.RabbitMQ:
		f.ImportAlias(amqpPkg, "amqp")
		f.ImportName(idemamqpPkg, "idemamqp")
		client = jen.Id("conn").Op("*").Qual(amqpPkg, "Connection")
		source = jen.Qual(idemamqpPkg, "NewSource").Call(jen.Id("ctx"), jen.Id("conn"), jen.Qual(idemamqpPkg, "SourceConfig").Values(jen.Dict{
			jen.Id("Queue"): jen.Lit(c.From), jen.Id("ConsumerTag"): jen.Lit(c.Group)}))
		doc = fmt.Sprintf("the RabbitMQ queue\n%q, as consumer %q, on a channel of conn", c.From, c.Group)
	case model.Kafka:
		f.ImportName(kgoPkg, "kgo")
		f.ImportName(idemkafkaPkg, "idemkafka")
		client = jen.Id("kafka").Index().Qual(kgoPkg, "Opt")
		source = jen.Qual(idemkafkaPkg, "NewSource").Call(jen.Id("ctx"), jen.Qual(idemkafkaPkg, "SourceConfig").Values(jen.Dict{
			jen.Id("Topic"): jen.Lit(c.From), jen.Id("Group"): jen.Lit(c.Group)}), jen.Id("kafka").Op("..."))
		doc = fmt.Sprintf("the Kafka topic\n%q in consumer group %q, on a franz-go client made with the\noptions kafka (seed brokers, TLS, ...)", c.From, c.Group)
	default:
		return
	}
	docLines(f, fmt.Sprintf("Consume runs the %s job as a consumer of %s,\nuntil ctx ends, as ConsumeFrom does (which closes the subscription when it returns).", j.Name, doc))
	f.Func().Add(recv(j)).Id("Consume").Params(jen.Id("ctx").Add(Context()), client, jen.Id("opts").Op("...").Add(brk("Option"))).Error().Block(
		jen.List(jen.Id("src"), jen.Err()).Op(":=").Add(source),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(Errorf().Call(jen.Lit(fmt.Sprintf("job %q: %%w", j.Name)), jen.Err()))),
		jen.Return(jen.Id("j").Dot("ConsumeFrom").Call(jen.Id("ctx"), jen.Id("src"), jen.Id("opts").Op("..."))),
	)
}
