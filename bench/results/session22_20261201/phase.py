import csv,sys,re
SAMPLES="Warp Stall Sampling (All Samples)"
def load(path):
    rows=list(csv.reader(open(path)))
    h=next(i for i,r in enumerate(rows) if SAMPLES in r)
    hdr,body=rows[h],rows[h+1:]
    i_src,i_smp=hdr.index("Source"),hdr.index(SAMPLES)
    stall=[i for i,x in enumerate(hdr) if x.startswith("stall_") and "Not Issued" not in x]
    out=[]
    for r in body:
        if len(r)<=i_smp: continue
        s=float(r[i_smp] or 0)
        out.append((r[i_src].strip(), s, {hdr[i][6:]:float(r[i] or 0) for i in stall}))
    return out
def phases(ins):
    # landmarks in loop order
    idx=[i for i,(s,_,_) in enumerate(ins)]
    src=[s for s,_,_ in ins]
    def find(pat,start=0):
        for i in range(start,len(src)):
            if re.search(pat,src[i]): return i
        return None
    a=find(r'SYNCS.PHASECHK.*TRYWAIT P1, \[R\d+\+URZ\]',900)   # full[st] wait (loop top area)
    b=find(r'WARPGROUP.DEPBAR',a)             # S,dP wait
    c=find(r'BAR.SYNC.DEFER_BLOCKING 0x3',b)  # pair barrier
    d=find(r'WARPGROUP.DEPBAR',c)             # dK dV wait
    e=find(r'WARPGROUP.ARRIVE',d+1)           # dQ issue
    f=find(r'WARPGROUP.DEPBAR',e)             # dQ wait
    g=find(r'UBLKRED',f)                      # bulk
    h=find(r'SYNCS.PHASECHK',g)               # produce
    marks=[('prologue',0),('top->S,dP wait',a-40),('S,dP wait',b),('elementwise..pair bar',b+1),('pair bar',c),('dKdV wait',d),('arrive,claims,appends',d+1),('dQ(+stat) issue',e),('dQ wait',f),('after wait..bulk',f+1),('bulk..end',g+1),('epilogue',h+200)]
    return marks
for path in sys.argv[1:]:
    ins=load(path)
    tot=sum(s for _,s,_ in ins)
    marks=phases(ins)
    print('==',path.split('/')[-2],'total',int(tot))
    for k,(name,st) in enumerate(marks):
        en=marks[k+1][1] if k+1<len(marks) else len(ins)
        s=sum(x for _,x,_ in ins[st:en])
        rs={}
        for _,_,d in ins[st:en]:
            for kk,v in d.items(): rs[kk]=rs.get(kk,0)+v
        top=sorted(rs.items(),key=lambda t:-t[1])[:3]
        print(f'  {name:24s} [{st:5d},{en:5d}) {int(s):7d} {100*s/tot:5.1f}%  '+' '.join(f'{kk}:{int(v)}' for kk,v in top))
