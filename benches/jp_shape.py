"""Measures the real JP conversations for `convstore gen --shape jp`.

Prints the twenty-quantiles (and maximum) of steps per turn and of each
kind's text sizes, the step mix and the tool frequencies that
cli/src/generate.rs (`jp_shape`) embeds. Run from the repository root with
../shared/data/jp beside it:

    python3 benches/jp_shape.py
"""
import json,glob,collections,base64
files=sorted(glob.glob('../shared/data/jp/*.events.json'))
turn_steps=[]; sizes=collections.defaultdict(list); tools=collections.Counter(); stepkinds=collections.Counter()
for f in files:
    ev=json.load(open(f))
    steps=None
    for e in ev:
        t=e.get('type')
        if t=='chat_request':
            if steps is not None: turn_steps.append(steps)
            steps=0; sizes['user'].append(len(e.get('content','') or ''))
        elif t=='chat_response':
            if steps is None: continue
            if 'reasoning' in e: sizes['reasoning'].append(len(e['reasoning'])); stepkinds['reasoning']+=1; steps+=1
            elif 'message' in e: sizes['assistant'].append(len(e['message'])); stepkinds['assistant']+=1; steps+=1
        elif t=='tool_call_request':
            if steps is None: continue
            tools[e.get('name')]+=1; sizes['arguments'].append(len(json.dumps(e.get('arguments')))); stepkinds['tool']+=1; steps+=1
        elif t=='tool_call_response':
            c=e.get('content','')
            sizes['result'].append(len(c) if isinstance(c,str) else len(json.dumps(c)))
    if steps is not None: turn_steps.append(steps)
def q(xs,n=20):
    xs=sorted(xs); return [xs[min(len(xs)-1,int(i*len(xs)/n))] for i in range(n)]+[xs[-1]]
print('turns',len(turn_steps),'events', sum(turn_steps))
print('STEPS', q(turn_steps,20))
for k,v in sizes.items(): print(k, len(v), q(v))
print(stepkinds)
print(tools.most_common(12))
