package golang

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// idembrokerPkg is the broker-agnostic runtime a consumer or a publishing
// effect uses; the adapters (idemnats, idemamqp, idemkafka) are imported
// only by the jobs that consume from their broker.
const idembrokerPkg = "github.com/idemgen/idemgen/idem/idembroker"

func brk(name string) *jen.Statement { return jen.Qual(idembrokerPkg, name) }

// effectProvider is the type of an effect's field in the job's Effects:
// the effect's interface, or an idembroker.Publisher for one that publishes.
func effectProvider(e *model.Effect) *jen.Statement {
	if e.Publish != nil {
		return brk("Publisher")
	}
	return jen.Id(e.GoName)
}

// brokerNames are how docs name each broker.
var brokerNames = map[model.Broker]string{model.NATS: "NATS JetStream", model.RabbitMQ: "RabbitMQ", model.Kafka: "Kafka"}

// publishDoc is the comment on a publishing effect's field in Effects:
//
//	// AnnounceInvoice publishes the unit as JSON to NATS JetStream subject
//	// "invoices.new" (an idemnats.Publisher, say), the effect key its dedupe id.
func publishDoc(g *jen.Group, e *model.Effect) {
	pb := e.Publish
	noun := map[model.Broker]string{model.NATS: "subject", model.RabbitMQ: "routing key", model.Kafka: "topic"}[pb.Broker]
	adapter := map[model.Broker]string{model.NATS: "idemnats", model.RabbitMQ: "idemamqp", model.Kafka: "idemkafka"}[pb.Broker]
	g.Commentf("%s publishes the unit as JSON to %s %s %q", e.GoName, brokerNames[pb.Broker], noun, pb.To)
	g.Commentf("(an %s.Publisher), with the effect key as the broker's dedupe id; the broker's", adapter)
	g.Comment("acknowledgement is the effect's kept result.")
}

// publishCall is a publishing effect's Call: the unit, canonical, as JSON,
// published under the effect key.
//
//	func(ctx context.Context, key string, unit Invoice) ([]byte, error) {
//		body, err := json.Marshal(unit.canonical())
//		if err != nil {
//			return nil, fmt.Errorf("effect %q: encode the unit: %w", "announce_invoice", err)
//		}
//		return fx.AnnounceInvoice.Publish(ctx, "invoices.new", key, body)
//	}
func publishCall(j *model.Job, e *model.Effect) *jen.Statement {
	return jen.Func().Params(effectParams(j)...).Params(jen.Index().Byte(), jen.Error()).Block(
		jen.List(jen.Id("body"), jen.Err()).Op(":=").Qual(jsonPkg, "Marshal").Call(jen.Id("unit").Dot("canonical").Call()),
		jen.If(jen.Err().Op("!=").Nil()).Block(
			jen.Return(jen.Nil(), Errorf().Call(jen.Lit(fmt.Sprintf("effect %q: encode the unit: %%w", e.Name)), jen.Err()))),
		jen.Return(jen.Id("fx").Dot(e.GoName).Dot("Publish").Call(jen.Id("ctx"), jen.Lit(e.Publish.To), jen.Id("key"), jen.Id("body"))),
	)
}

// simPublisherName is the crash simulation's Publisher: the fake provider,
// called as any effect's provider is.
const simPublisherName = "simPublisher"

// simPublisher emits, once per crash-simulation file whose package has a
// publishing effect, the Publisher that stands in for the broker:
//
//	type simPublisher struct { fx *crashsim.Provider; effect string }
//	func (p simPublisher) Publish(ctx context.Context, to, key string, body []byte) ([]byte, error) {
//		return p.fx.Call(ctx, p.effect, key)
//	}
func simPublisher(f *jen.File, p *model.Package) {
	for _, j := range p.Jobs {
		for _, e := range j.Effects {
			if e.Publish == nil {
				continue
			}
			f.Commentf("%s stands in for the broker of the publishing effects: each publish is", simPublisherName)
			f.Comment("a call of the simulation's fake provider, which counts it.")
			f.Type().Id(simPublisherName).Struct(
				jen.Id("fx").Op("*").Add(sim("Provider")),
				jen.Id("effect").String(),
			)
			f.Comment("Publish calls the fake provider under the effect key.")
			f.Func().Params(jen.Id("p").Id(simPublisherName)).Id("Publish").Params(
				jen.Id("ctx").Add(Context()), jen.List(jen.Id("to"), jen.Id("key")).String(), jen.Id("body").Index().Byte(),
			).Params(jen.Index().Byte(), jen.Error()).Block(
				jen.Return(jen.Id("p").Dot("fx").Dot("Call").Call(jen.Id("ctx"), jen.Id("p").Dot("effect"), jen.Id("key"))),
			)
			return
		}
	}
}
