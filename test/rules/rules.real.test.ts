import { realTarget } from '../helpers/kube-target.ts';
import { ruleScenarios } from './rule-scenarios.ts';

ruleScenarios('real kube-apiserver', realTarget);
