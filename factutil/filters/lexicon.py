"""The relation lexicon (docs/method.md §2.4): each relation's id, Wikidata property, forward and inverse phrasings, and the fuzzy-match cutoffs."""

from __future__ import annotations

from dataclasses import dataclass

# Cutoffs (rapidfuzz scores, 0..100), documented in the module docstring.
ENTITY_CUTOFF = 88.0
RELATION_TEXT_CUTOFF = 85.0
RELATION_LOOKUP_CUTOFF = 92.0


# --------------------------------------------------------------------------------------------
# Relation lexicon
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Relation:
    """One lexicon entry: a relation id with its verbalisations.

    ``forward`` texts read "subject REL object" in the id's direction; ``inverse`` texts read it
    with subject and object swapped. ``general`` names a broader id and ``general_inverted`` says
    whether subject and object swap on the way up (father → child). ``dated`` marks relations whose
    object is a date.
    """

    id: str
    pid: str
    forward: tuple[str, ...]
    inverse: tuple[str, ...] = ()
    symmetric: bool = False
    general: str | None = None
    general_inverted: bool = False
    dated: bool = False


def _split(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(";") if v.strip())


def _r(id_, pid, forward, inverse="", *, sym=False, gen=None, inv_gen=False, dated=False):
    """A lexicon entry; verbalisations are ';'-separated, the id is a forward one too."""
    return Relation(id_, pid, (id_, *_split(forward)), _split(inverse), sym, gen, inv_gen, dated)


RELATIONS: tuple[Relation, ...] = (
    # copula / possession pseudo-relations
    _r("be", "", "is; are; was; were; been; being; am; is a; is an"),
    _r("have", "", "has; had; having; possesses; possess"),
    # birth, death, burial
    _r("place of birth", "P19", "birthplace; birth place; born in; born at; born;"
       " place of birth is; native of; born in the city of", "birthplace of; place of birth of"),
    _r("date of birth", "P569", "born on; born in; born; birth date; birthdate; date born;"
       " year of birth; birth year; dob; date of birth is", dated=True),
    _r("place of death", "P20", "died in; died at; death place; deathplace; died; passed away in;"
       " passed away at; killed in; place of death is; location of death",
       "place of death of"),
    _r("date of death", "P570", "died on; died in; died; death date; date died; year of death;"
       " death year; passed away; passed away on; passed away in; killed in; dod", dated=True),
    _r("cause of death", "P509", "died of; died from; death cause; killed by disease"),
    _r("place of burial", "P119", "buried in; buried at; burial place; resting place;"
       " interred in; interred at; grave; burial site", "burial place of"),
    _r("killed by", "P157", "murdered by; assassinated by; killer; slain by; shot by",
       "killed; murdered; assassinated; killer of; slew; shot"),
    # family
    _r("father", "P22", "dad; has father; father is", "father of", gen="child", inv_gen=True),
    _r("mother", "P25", "mom; mum; has mother; mother is", "mother of", gen="child",
       inv_gen=True),
    _r("child", "P40", "children; has child; has children; offspring; kid; kids; parent of;"
       " father or mother of", "child of; children of; parent; parents; has parent;"
       " offspring of; kid of"),
    _r("son", "", "sons; has son", "son of", gen="child"),
    _r("daughter", "", "daughters; has daughter", "daughter of", gen="child"),
    _r("spouse", "P26", "married to; married; wed; wedded to; spouse of; spouses; husband or wife;"
       " is married to; marriage to", sym=True),
    _r("husband", "", "has husband", "husband of", gen="spouse"),
    _r("wife", "", "has wife", "wife of", gen="spouse"),
    _r("unmarried partner", "P451", "partner; domestic partner; companion; boyfriend;"
       " girlfriend; partner of; lover; in a relationship with", sym=True),
    _r("sibling", "P3373", "siblings; sibling of; brother or sister", sym=True),
    _r("brother", "", "brothers; has brother", "brother of", gen="sibling"),
    _r("sister", "", "sisters; has sister", "sister of", gen="sibling"),
    _r("relative", "P1038", "relatives; related to; relative of; kin; kinsman; family member",
       sym=True),
    _r("cousin", "", "cousins; cousin of", sym=True, gen="relative"),
    _r("uncle", "", "has uncle", "uncle of", gen="relative"),
    _r("aunt", "", "has aunt", "aunt of", gen="relative"),
    _r("nephew", "", "has nephew", "nephew of", gen="relative"),
    _r("niece", "", "has niece", "niece of", gen="relative"),
    _r("grandfather", "", "has grandfather", "grandfather of", gen="relative"),
    _r("grandmother", "", "has grandmother", "grandmother of", gen="relative"),
    _r("grandson", "", "has grandson", "grandson of", gen="relative"),
    _r("granddaughter", "", "has granddaughter", "granddaughter of", gen="relative"),
    _r("grandchild", "", "grandchildren", "grandchild of", gen="relative"),
    _r("stepfather", "", "step father", "stepfather of", gen="relative"),
    _r("stepmother", "", "step mother", "stepmother of", gen="relative"),
    _r("father in law", "", "father-in-law", "father in law of", gen="relative"),
    _r("mother in law", "", "mother-in-law", "mother in law of", gen="relative"),
    _r("son in law", "", "son-in-law", "son in law of", gen="relative"),
    _r("daughter in law", "", "daughter-in-law", "daughter in law of", gen="relative"),
    _r("brother in law", "", "brother-in-law", "brother in law of", gen="relative"),
    _r("sister in law", "", "sister-in-law", "sister in law of", gen="relative"),
    _r("half brother", "", "half-brother", "half brother of", gen="relative"),
    _r("half sister", "", "half-sister", "half sister of", gen="relative"),
    # creative works
    _r("director", "P57", "directed by; film director; director is; directors; has director",
       "director of; directed; directs; directed the film; was director of"),
    _r("cast member", "P161", "starring; stars; starred; cast; actor; actress; actors;"
       " cast members; starring actor; featuring actor",
       "starred in; stars in; acted in; appeared in; cast member of; actor in; actress in;"
       " appears in; played in; cast in; starring in"),
    _r("screenwriter", "P58", "screenplay by; written for the screen by; scriptwriter;"
       " script by; screenwriters", "wrote the screenplay for; wrote the screenplay of;"
       " screenwriter of; wrote screenplay for; scripted"),
    _r("producer", "P162", "produced by; producers", "produced; producer of; produces"),
    _r("executive producer", "P1431", "executive produced by", "executive producer of"),
    _r("composer", "P86", "composed by; music by; music composed by; score by",
       "composed; composer of; composes; wrote the music for; scored"),
    _r("lyrics by", "P676", "lyricist; words by; lyrics written by",
       "wrote the lyrics for; lyricist of; wrote lyrics for"),
    _r("performer", "P175", "performed by; sung by; recorded by; artist; singer; performers;"
       " song by; album by", "performed; performer of; sang; recorded; sings; performs"),
    _r("author", "P50", "written by; writer; authored by; authors; novel by; book by",
       "author of; wrote; writes; authored; writer of"),
    _r("creator", "P170", "created by; made by; creators", "created; creator of; creates; made"),
    _r("director of photography", "P344", "cinematographer; cinematography by; photographed by",
       "cinematographer of; director of photography of"),
    _r("film editor", "P1040", "editor; edited by", "edited; editor of; edits"),
    _r("voice actor", "P725", "voiced by; voice; voice cast", "voiced; voice actor of; voices"),
    _r("characters", "P674", "character; features character; has character",
       "present in work; appears in work; character in; character of"),
    _r("narrative location", "P840", "set in; takes place in; setting; set at"),
    _r("filming location", "P915", "filmed in; filmed at; shot in; shot at; shooting location"),
    _r("based on", "P144", "adapted from; adaptation of; inspired by",
       "adapted into; basis for; adapted as; derivative work"),
    _r("genre", "P136", "music genre; film genre; genres; type of music"),
    _r("record label", "P264", "label; signed to; signed with; record company"),
    _r("original broadcaster", "P449", "broadcaster; aired on; broadcast on; network;"
       " original network; channel; airs on", "broadcast; aired; airs"),
    _r("production company", "P272", "studio; produced by company; production companies"),
    _r("distributor", "P750", "distributed by; distribution company",
       "distributed; distributes; distributor of"),
    _r("publisher", "P123", "published by; publishing house",
       "published; publishes; publisher of"),
    _r("published in", "P1433", "appeared in journal; published in journal"),
    _r("publication date", "P577", "published on; published in; published; release date;"
       " released on; released in; released; date of publication; date of release;"
       " year of publication; publication year; first published; came out; came out in;"
       " released date; premiered; premiered on; premiered in", dated=True),
    _r("country of origin", "P495", "origin country; originates from; originated in;"
       " released in; country of production", gen="country"),
    _r("notable work", "P800", "notable works; known for; famous for; best known for;"
       " magnum opus; major work"),
    _r("original language of film or tv show", "P364", "original language",
       gen="language of work or name"),
    _r("language of work or name", "P407", "language; in language; language of work;"
       " written in language"),
    _r("native language", "P103", "mother tongue; first language",
       gen="languages spoken written or signed"),
    _r("languages spoken written or signed", "P1412", "languages spoken; speaks;"
       " language spoken; speaks language; languages"),
    _r("official language", "P37", "official languages"),
    _r("instrument", "P1303", "plays instrument; played instrument; instruments"),
    _r("follows", "P155", "preceded by; comes after; predecessor; successor of; succeeded;"
       " succeeds; replaced; sequel to; sequel of; next after",
       "followed by; succeeded by; precedes; preceded; comes before; successor; predecessor of;"
       " replaced by; prequel to; sequel; prequel of"),
    _r("influenced by", "P737", "influence; inspired", "influenced"),
    # organisations, places
    _r("founded by", "P112", "founder; founders; established by; co founded by; cofounded by;"
       " started by; set up by", "founded; founder of; established; co founded; cofounded;"
       " started; set up; co founder of; cofounder of"),
    _r("inception", "P571", "founded; founded in; founded on; established; established in;"
       " established on; formed in; formed; founding date; date founded; year founded;"
       " date of establishment; creation date; created in; built in; opened in; opened;"
       " built; year of foundation; foundation date", dated=True),
    _r("dissolved abolished or demolished date", "P576", "dissolved; dissolved in;"
       " dissolution date; abolished; abolished in; disestablished; demolished; demolished in;"
       " closed in; defunct since; date of dissolution", dated=True),
    _r("start time", "P580", "start date; started on; began; began in; began on; started in",
       dated=True),
    _r("end time", "P582", "end date; ended; ended on; ended in; finished in", dated=True),
    _r("point in time", "P585", "date; happened on; occurred on; took place on; happened in;"
       " occurred in; took place in; held on; held in; happened; occurred; when", dated=True),
    _r("location of formation", "P740", "formed in; founded in; established in;"
       " place of formation; formed at; founded at", gen="location"),
    _r("headquarters location", "P159", "headquarters; headquartered in; headquartered at;"
       " headquarters in; hq; head office; based in; headquarter", "headquarters of",
       gen="location"),
    _r("location", "P276", "located in; located at; situated in; situated at; located;"
       " lies in; in; at; built in; held in; took place in; site; venue; opened in; created in",
       "location of; site of; home to; venue of; contains; includes; encompasses",
       gen="be"),
    _r("located in the administrative territorial entity", "P131",
       "located in administrative territorial entity; administrative territorial entity;"
       " in administrative territorial entity; administrative division",
       "contains administrative territorial entity; contains the administrative territorial"
       " entity; contains administrative division", gen="location"),
    _r("country", "P17", "located in country; in country; country is; nation; sovereign state",
       gen="location"),
    _r("country of citizenship", "P27", "citizenship; citizen of; nationality; national of;"
       " citizen; holds citizenship of; citizenship of", gen="country"),
    _r("continent", "P30", "located on continent; on continent; located on the continent",
       gen="location"),
    _r("located in or next to body of water", "P206", "body of water; next to body of water;"
       " located next to body of water; located on body of water; on the shore of; lies on",
       gen="location"),
    _r("shares border with", "P47", "shares a border with; borders; bordered by; adjacent to;"
       " neighbours; neighbors; bordering; border with; neighbor of; neighbour of; border",
       sym=True),
    _r("capital", "P36", "capital city; has capital; capital is; seat of government",
       "capital of; capital city of; is capital of; seat of government of"),
    _r("part of", "P361", "is part of; belongs to; component of; section of; piece of",
       "has part; has parts; consists of; comprises; made up of; part"),
    _r("part of the series", "P179", "series; part of series; in series; installment of",
       gen="part of"),
    _r("instance of", "P31", "type; is a type of; category; is instance of; instance",
       gen="be"),
    _r("subclass of", "P279", "type of; kind of; sort of; is a kind of; subtype of",
       gen="be"),
    _r("applies to jurisdiction", "P1001", "jurisdiction; applies to; valid in"),
    _r("licensed to broadcast to", "P1408", "licensed to; broadcasts to; serves; service area"),
    _r("mouth of the watercourse", "P403", "mouth of watercourse; mouth; flows into;"
       " drains into; empties into; discharges into; tributary of; outflows into"),
    _r("origin of the watercourse", "P885", "source of the watercourse; source; rises in;"
       " river source"),
    _r("head of government", "P6", "mayor; prime minister; governor; premier; chancellor",
       "mayor of; prime minister of; head of government of; governor of; premier of;"
       " chancellor of"),
    _r("head of state", "P35", "president; king; monarch; queen; emperor; ruler; sovereign",
       "president of; king of; head of state of; monarch of; queen of; ruler of;"
       " emperor of; ruled"),
    _r("population", "P1082", "number of inhabitants; inhabitants; has population;"
       " population of; residents"),
    _r("area", "P2046", "surface area; total area; covers; size"),
    _r("elevation above sea level", "P2044", "elevation; altitude; height above sea level;"
       " elevation above sea"),
    _r("height", "P2048", "tall; is tall; stands"),
    _r("length", "P2043", "long; is long"),
    _r("duration", "P2047", "runtime; running time; run time; lasts; lasted"),
    _r("number of deaths", "P1120", "death toll; deaths; fatalities; number of fatalities;"
       " people killed"),
    _r("box office", "P2142", "grossed; gross; earned; box office gross"),
    _r("cost", "P2130", "budget; costs; cost of production"),
    _r("owned by", "P127", "owner; owners; property of", "owns; owner of; owned"),
    _r("parent organization", "P749", "parent company; subsidiary of; division of; unit of;"
       " parent organisation", "subsidiary; subsidiaries; has subsidiary;"
       " parent organization of; parent company of; parent organisation of"),
    _r("manufacturer", "P176", "manufactured by; built by; maker",
       "manufactured; manufactures; makes; manufacturer of"),
    _r("developer", "P178", "developed by", "developed; developer of; develops"),
    _r("designed by", "P287", "designer", "designed; designer of; designs"),
    _r("architect", "P84", "architects; architect is", "architect of", gen="designed by"),
    _r("chairperson", "P488", "chairman; chair; chairwoman; chaired by",
       "chairperson of; chairman of; chairs; chaired; chairwoman of"),
    _r("chief executive officer", "P169", "ceo; chief executive",
       "ceo of; chief executive officer of; chief executive of"),
    _r("head coach", "P286", "coach; coached by; manager; managed by",
       "coach of; head coach of; coached; coaches; manager of; managed; manages"),
    _r("employer", "P108", "employed by; works for; worked for; work for; employee of;"
       " worked at; works at; employed at", "employs; employed; employer of"),
    _r("educated at", "P69", "studied at; attended; alumnus of; alumna of; alumni of;"
       " graduated from; graduate of; went to; school; alma mater; student at; studied in;"
       " college; university", "alma mater of; school of; attended by"),
    _r("student of", "P1066", "studied under; trained under; pupil of; apprentice of;"
       " disciple of; teacher; mentor; teachers; mentored by; taught by",
       "teacher of; mentor of; taught; trained; student; students; pupil; pupils; mentored"),
    _r("doctoral advisor", "P184", "phd advisor; doctoral supervisor; supervisor; advisor",
       "doctoral student; doctoral students; phd student; phd students; supervised; advised",
       gen="student of"),
    _r("occupation", "P106", "profession; job; works as; worked as; career; occupations",
       gen="be"),
    _r("position held", "P39", "position; held position; served as; office held; office;"
       " held office; post"),
    _r("field of work", "P101", "field; works in field; research field; area of expertise;"
       " specialty; specialization; discipline"),
    _r("member of", "P463", "belongs to organization; membership; member"),
    _r("member of political party", "P102", "political party; party; party affiliation",
       gen="member of"),
    _r("member of sports team", "P54", "sports team; team; plays for; played for; club;"
       " member of team; team member of; signed for", gen="member of"),
    _r("league", "P118", "plays in league; competes in; league of"),
    _r("home venue", "P115", "home ground; stadium; plays at; home stadium; home arena"),
    _r("sport", "P641", "plays sport; sports"),
    _r("position played on team speciality", "P413", "position played; plays as;"
       " playing position; played as"),
    _r("conflict", "P607", "participated in conflict; fought in; war; battle"),
    _r("participant", "P710", "participants; participating; competitors",
       "participated in; participant in; took part in; competed in; participant of"),
    _r("award received", "P166", "award; awards; won; won award; received award; awarded;"
       " recipient of; winner of; honored with; honoured with; received; won the award;"
       " prize; awarded the", "awarded to; given to; received by; won by; winner; winners;"
       " recipient; recipients"),
    _r("nominated for", "P1411", "nomination; nominee for; nominated; nominations",
       "nominee; nominees"),
    _r("religion", "P140", "religious affiliation; faith; religion or worldview; believes in"),
    _r("ethnic group", "P172", "ethnicity; ethnic origin"),
    _r("sex or gender", "P21", "gender; sex"),
    _r("named after", "P138", "named for; eponym; namesake; name origin", "namesake of"),
    _r("residence", "P551", "lives in; lived in; resides in; resided in; resident of; home;"
       " living in; lives at; lived at; residence of"),
    _r("work location", "P937", "worked in; works in; place of work; workplace"),
    _r("medical condition", "P1050", "suffers from; suffered from; diagnosed with; disease;"
       " illness"),
    _r("convicted of", "P1399", "found guilty of; conviction"),
    _r("twinned administrative body", "P190", "sister city; twin town; twinned with;"
       " twin city; sister cities; sister city of; twin town of", sym=True),
    _r("diplomatic relation", "P530", "diplomatic relations with; diplomatic relations",
       sym=True),
    _r("architectural style", "P149", "building style"),
    _r("movement", "P135", "art movement; artistic movement"),
)

RELATION_BY_ID: dict[str, Relation] = {rel.id: rel for rel in RELATIONS}
